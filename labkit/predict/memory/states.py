"""The ledger of model states: bytes per parameter, per GPU, per strategy.

    from labkit.predict.memory.states import ledger
    ledger(70e9, 8, "zero3").gpu_total      # 140e9 bytes: 16 Psi / 8

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

Pure Python; :mod:`labkit.predict.memory` is its command line.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

# Strategy names, ZeRO's and FSDP's, and how each treats the three terms.
ZERO_STAGE = {"ddp": 0, "zero0": 0, "no_shard": 0, "zero1": 1, "zero2": 2,
              "zero3": 3, "full_shard": 3, "shard_grad_op": 3,
              "hybrid_shard": 3}
STRATEGIES = tuple(ZERO_STAGE)
FSDP_STRATEGIES = ("full_shard", "shard_grad_op", "hybrid_shard", "no_shard")
OPTIMIZERS = ("adam", "sgd_momentum", "sgd")
PRECISIONS = ("mixed", "fp32")
OFFLOADS = ("none", "optimizer", "params")


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
    memory (ZeRO-Offload, Ren et al. 2021, Sec. 3: GPU keeps the 16-bit
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
