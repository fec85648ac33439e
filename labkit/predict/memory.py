"""The memory ledger: where the bytes of training go, per GPU (pure Python).

    python -m labkit memory --params 70e9 --gpus 8 --gpu-mem 80 --stage 3
    python -m labkit memory --params 70e9 --gpus 8 --gpu-mem 80 --stage 3 \
        --offload optimizer --json
    python -m labkit memory --hf-config config.json --gpus 8 --stage 3

Model states (Rajbhandari et al. 2020, "ZeRO", Sec. 3.1 and Fig. 1): with
mixed-precision Adam each parameter costs 2 bytes (fp16/bf16 weights) +
2 bytes (gradients) + K = 12 bytes (fp32 master weights, momentum and
variance), 16 bytes in all, so plain data parallelism (DDP = ZeRO-0) keeps
16 Psi bytes on every GPU. ZeRO partitions those three terms over the N_d
data-parallel ranks one after another (Fig. 1):

    ZeRO-0 (DDP)  (2 + 2 + K) Psi
    ZeRO-1 (P_os)  2 Psi + 2 Psi + K Psi / N_d
    ZeRO-2 (P_os+g) 2 Psi + (2 + K) Psi / N_d
    ZeRO-3 (P_os+g+p) (2 + 2 + K) Psi / N_d      (= FSDP FULL_SHARD)

Activations are a separate term (Korthikanti et al. 2022, Table 2), see
:func:`activation_bytes_per_layer`. All sizes are bytes; the command line
prints GB = 1e9 bytes (not GiB), as the ZeRO paper and the course do.
"""
from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass

GB = 1e9

# Strategy names, ZeRO's and FSDP's, and how each treats the three terms.
ZERO_STAGE = {"ddp": 0, "zero0": 0, "no_shard": 0, "zero1": 1, "zero2": 2,
              "zero3": 3, "full_shard": 3, "shard_grad_op": 3,
              "hybrid_shard": 3}
STRATEGIES = tuple(ZERO_STAGE)
FSDP_STRATEGIES = ("full_shard", "shard_grad_op", "hybrid_shard", "no_shard")
OPTIMIZERS = ("adam", "sgd_momentum", "sgd")
PRECISIONS = ("mixed", "fp32")
OFFLOADS = ("none", "optimizer", "params")


# -- parameter count: labkit.predict.params (every tensor of a record) ----
from labkit.predict.params import gpt_params  # noqa: E402,F401


# -- bytes per parameter ---------------------------------------------------

@dataclass(frozen=True)
class BytesPerParam:
    params: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer


def bytes_per_param(precision: str = "mixed", optimizer: str = "adam",
                    fp32_grads: bool = False) -> BytesPerParam:
    """Bytes each parameter costs in weights, gradients and optimizer state.

    - ``mixed`` (ZeRO Sec. 3.1): 16-bit weights and gradients; the optimizer
      holds an fp32 master copy (4) plus its own states: Adam's momentum and
      variance (4 + 4), so K = 12; SGD with momentum 4 + 4; plain SGD 4.
    - ``fp32``: 4-byte weights and gradients; Adam 8 (momentum, variance),
      SGD with momentum 4, plain SGD 0. fp32 Adam is 4 + 4 + 8 = 16 too.
    - ``fp32_grads``: gradients accumulated in fp32 (4 bytes) under mixed
      precision, as Megatron-LM's ``main_grad`` does: 2 + 4 + 12 = 18.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: {PRECISIONS}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}: {OPTIMIZERS}")
    states = {"adam": 8, "sgd_momentum": 4, "sgd": 0}[optimizer]
    if precision == "fp32":
        return BytesPerParam(4, 4, states)
    return BytesPerParam(2, 4 if fp32_grads else 2, 4 + states)


# -- the ledger --------------------------------------------------------------

@dataclass
class Ledger:
    """Model-state bytes one rank holds, split by where they live."""
    strategy: str
    params: float            # Psi, number of parameters
    gpus: int                # N_d, data-parallel ranks
    params_gpu: float
    grads_gpu: float
    optimizer_gpu: float
    params_cpu: float = 0.0
    grads_cpu: float = 0.0
    optimizer_cpu: float = 0.0
    # unsharded weights alive from forward to the end of backward (FSDP
    # SHARD_GRAD_OP keeps them, like ZeRO-2 keeps its replicated weights)
    transient_gpu: float = 0.0

    @property
    def gpu_total(self) -> float:
        return (self.params_gpu + self.grads_gpu + self.optimizer_gpu
                + self.transient_gpu)

    @property
    def cpu_total(self) -> float:
        return self.params_cpu + self.grads_cpu + self.optimizer_cpu

    @property
    def total(self) -> float:
        return self.gpu_total + self.cpu_total

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(gpu_total=self.gpu_total, cpu_total=self.cpu_total)
        return d


def ledger(params: float, gpus: int = 1, strategy: str = "zero3",
           precision: str = "mixed", optimizer: str = "adam",
           offload: str = "none", shard_group: int | None = None,
           fp32_grads: bool = False) -> Ledger:
    """Per-rank model states for a strategy (ZeRO paper Fig. 1 / Sec. 5).

    ``strategy``: ``ddp``/``zero0``, ``zero1``, ``zero2``, ``zero3``, or the
    FSDP names ``full_shard`` (= ZeRO-3), ``shard_grad_op`` (sharded at rest
    like ZeRO-3, but the unsharded weights stay from forward through
    backward, as ZeRO-2's do: ``transient_gpu``), ``hybrid_shard`` (ZeRO-3
    inside groups of ``shard_group`` ranks, replicated across groups; Zhao
    et al. 2023, "PyTorch FSDP", Sec. 3.2.2) and ``no_shard`` (= DDP).

    ``offload``: ``optimizer`` moves gradients and optimizer states to CPU
    memory (ZeRO-Offload, Ren et al. 2021, Sec. 4.1: GPU keeps the 16-bit
    weights, CPU the 16-bit gradients and the K bytes), ``params`` moves the
    weights too (ZeRO-Infinity / FSDP CPU offload; ZeRO-3 only).
    """
    if strategy not in ZERO_STAGE:
        raise ValueError(f"unknown strategy {strategy!r}: {STRATEGIES}")
    if offload not in OFFLOADS:
        raise ValueError(f"unknown offload {offload!r}: {OFFLOADS}")
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        raise ValueError(f"gpus must be an integer >= 1, got {gpus!r}")
    if not params > 0 or not math.isfinite(params):
        raise ValueError(f"params must be a positive number, got {params!r}")
    if gpus > params:
        raise ValueError(f"{gpus} GPUs for {params:g} parameters: "
                         "more GPUs than parameters")
    stage = ZERO_STAGE[strategy]
    n = gpus
    if strategy == "hybrid_shard":
        shard_group = shard_group or gpus
        if gpus % shard_group:
            raise ValueError(f"hybrid_shard: {gpus} GPUs are not a whole "
                             f"number of shard groups of {shard_group}")
        n = shard_group
    elif shard_group not in (None, gpus):
        raise ValueError("shard_group applies to hybrid_shard only")
    if offload != "none" and stage == 0:
        raise ValueError(f"{strategy} keeps everything replicated on the "
                         "GPU; offload needs ZeRO-1/2/3 or a sharded FSDP")
    if offload == "params" and stage != 3:
        raise ValueError("parameter offload needs ZeRO-3 / FULL_SHARD")
    b = bytes_per_param(precision, optimizer, fp32_grads)
    psi = float(params)
    p = psi * b.params / (n if stage >= 3 else 1)
    g = psi * b.grads / (n if stage >= 2 else 1)
    o = psi * b.optimizer / (n if stage >= 1 else 1)
    led = Ledger(strategy, psi, gpus, p, g, o)
    if strategy == "shard_grad_op":
        led.transient_gpu = psi * b.params
    if offload in ("optimizer", "params"):
        led.grads_cpu, led.optimizer_cpu = g, o
        led.grads_gpu = led.optimizer_gpu = 0.0
    if offload == "params":
        led.params_cpu, led.params_gpu = p, 0.0
    return led


def fits(led: Ledger, gpu_mem_bytes: float) -> bool:
    return led.gpu_total <= gpu_mem_bytes


def smallest_gpus(params: float, gpu_mem_bytes: float, strategy: str = "zero3",
                  max_gpus: int = 1 << 20, **kw) -> int | None:
    """Fewest ranks whose per-rank model states fit (None: no count does)."""
    if ZERO_STAGE[strategy] == 0:
        return 1 if fits(ledger(params, 1, strategy, **kw), gpu_mem_bytes) else None
    lo, hi = 1, max_gpus
    if not fits(ledger(params, min(hi, int(params)), strategy, **kw),
                gpu_mem_bytes):
        return None
    while lo < hi:  # the GPU bytes fall (weakly) as the count grows
        mid = (lo + hi) // 2
        if fits(ledger(params, mid, strategy, **kw), gpu_mem_bytes):
            hi = mid
        else:
            lo = mid + 1
    return lo


def verdict(params: float, gpus: int, gpu_mem_bytes: float,
            strategy: str = "zero3", gpus_per_node: int = 8, **kw) -> dict:
    """Fits or not; if not, the fewest GPUs (and whole nodes) or an offload."""
    led = ledger(params, gpus, strategy, **kw)
    out = {"fits": fits(led, gpu_mem_bytes), "gpu_total": led.gpu_total,
           "gpu_mem": gpu_mem_bytes}
    if not out["fits"]:
        need = smallest_gpus(params, gpu_mem_bytes, strategy, **kw)
        out["smallest_gpus"] = need
        out["smallest_nodes"] = (None if need is None
                                 else math.ceil(need / gpus_per_node))
        if kw.get("offload", "none") == "none" and ZERO_STAGE[strategy] > 0:
            for off in ("optimizer", "params"):
                if off == "params" and ZERO_STAGE[strategy] != 3:
                    continue
                kw2 = {**kw, "offload": off}
                if fits(ledger(params, gpus, strategy, **kw2), gpu_mem_bytes):
                    out["offload_that_fits"] = off
                    break
    return out


# -- activations: labkit.predict.activation_budget (one concept per file) --
from labkit.predict.activation_budget import (  # noqa: E402,F401
    activation_bytes_model, activation_bytes_per_layer, layers_that_fit)


# -- command line -------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    from labkit.predict import arch
    arch.add_arguments(p)   # the count from a config.json or a preset
    p.add_argument("--params", type=float,
                   help="number of parameters, e.g. 70e9")
    p.add_argument("--gpus", type=int, default=8, help="data-parallel ranks")
    p.add_argument("--gpu-mem", type=float, default=80.0,
                   help="memory of one GPU in GB (1e9 bytes)")
    p.add_argument("--stage", type=int, default=3,
                   help="ZeRO stage 0-3 (0 = DDP, 3 = FSDP FULL_SHARD)")
    p.add_argument("--strategy", choices=FSDP_STRATEGIES,
                   help="an FSDP sharding strategy instead of --stage")
    p.add_argument("--shard-group", type=int,
                   help="ranks per shard group (hybrid_shard)")
    p.add_argument("--offload", choices=OFFLOADS, default="none")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adam")
    p.add_argument("--precision", choices=PRECISIONS, default="mixed")
    p.add_argument("--fp32-grads", action="store_true",
                   help="accumulate gradients in fp32 (mixed precision)")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--json", action="store_true",
                   help="bytes per GPU as JSON instead of a table in GB")


def main(args) -> int:
    from labkit.predict import arch
    from labkit.predict.params import total
    rec = arch.from_args(args)
    if (rec is None) == (args.params is None):
        raise ValueError("give --params N or --hf-config PATH / --preset "
                         "NAME (one of them)")
    if rec is not None:
        args.params = float(total(rec))
    if args.stage not in (0, 1, 2, 3):
        raise ValueError(f"--stage must be 0, 1, 2 or 3, got {args.stage}")
    if args.gpu_mem <= 0:
        raise ValueError(f"--gpu-mem must be positive, got {args.gpu_mem:g}")
    if args.gpus_per_node < 1:
        raise ValueError("--gpus-per-node must be >= 1")
    strategy = args.strategy or ("ddp", "zero1", "zero2", "zero3")[args.stage]
    kw = dict(precision=args.precision, optimizer=args.optimizer,
              offload=args.offload, fp32_grads=args.fp32_grads)
    if args.shard_group is not None:
        kw["shard_group"] = args.shard_group
    led = ledger(args.params, args.gpus, strategy, **kw)
    v = verdict(args.params, args.gpus, args.gpu_mem * GB, strategy,
                gpus_per_node=args.gpus_per_node, **kw)
    if args.json:
        print(json.dumps({"ledger": led.as_dict(), "verdict": v,
                          "unit": "bytes per GPU"}, indent=1))
        return 0
    print(f"{strategy} ({args.precision}, {args.optimizer}, offload "
          f"{args.offload}): {args.params:g} parameters on {args.gpus} GPUs"
          f" of {args.gpu_mem:g} GB  (GB = 1e9 bytes)")
    print(f"{'':12s}{'GPU':>10s}{'CPU':>10s}")
    for name in ("params", "grads", "optimizer"):
        gpu = getattr(led, f"{name}_gpu")
        if name == "params":
            gpu += led.transient_gpu
        print(f"{name:12s}{gpu / GB:10.2f}{getattr(led, name + '_cpu') / GB:10.2f}")
    print(f"{'total':12s}{led.gpu_total / GB:10.2f}{led.cpu_total / GB:10.2f}")
    if v["fits"]:
        print(f"fits: {led.gpu_total / GB:.2f} GB <= {args.gpu_mem:g} GB "
              "(model states only; activations come on top)")
    else:
        msg = f"does not fit: {led.gpu_total / GB:.2f} GB > {args.gpu_mem:g} GB"
        if v.get("smallest_gpus"):
            msg += (f"; fewest GPUs that fit: {v['smallest_gpus']}"
                    f" ({v['smallest_nodes']} node(s) of {args.gpus_per_node})")
        if v.get("offload_that_fits"):
            msg += f"; or offload the {v['offload_that_fits']} on {args.gpus} GPUs"
        print(msg)
    return 0
