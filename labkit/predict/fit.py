"""Make it fit, then make it fast: the per-rank bytes and the planner.

    python -m labkit.predict.fit      # the gpu8 capstone's table (7B, 8x80 GB)

Pure Python. The model is the course's GPT by its sizes (``layers``,
``hidden``, ``heads``, ``vocab``, ``seq``), a lab's model dict with its
``arch`` (``"gpt"`` or ``"llama"``: the Llama-style block at those sizes,
:func:`labkit.predict.model.arch.of_shape`), or an architecture record and a
sequence length (``{"arch": arch.preset("llama3-8b"), "seq": 8192}``).
A configuration is a strategy (``ddp`` or ``fsdp2_full`` =
ZeRO-3), a recompute mode, a per-rank micro-batch and the accumulation
steps that make up the global batch. :func:`per_rank_bytes` adds, for one
rank,

- model states: :func:`labkit.predict.memory.ledger` (fp32 weights and
  Adam: 16 bytes per parameter, whole for DDP, / N for FSDP; chapter 1);
- activations: :func:`labkit.predict.activations.arch.saved` for the
  micro-batch (exact, tensor by tensor; chapter 12);
- transients: DDP's gradient buckets (a second copy of the gradients,
  4 Psi, unless ``gradient_as_bucket_view``; with one micro-batch a step
  the gradients, set to None after each step, are not yet there at the
  end of the forward, where the activations peak: the peak is the larger
  of states + buckets + activations - gradients and states + buckets); FSDP's gathered units (the
  one computing and the one prefetched, 2 x the largest unit) and one
  unit's unsharded fp32 gradient before its reduce-scatter; under
  recomputation, the one block whose activations the backward has
  re-materialised (Korthikanti et al. 2022, Sec. 5).

This is an estimate of the peak, not a count: the gradients of the
activations in backward and the allocator's rounding come on top, so a
configuration fits when its bytes are at most ``headroom`` (0.8) of
the budget, and the lab
puts the measured peak beside it. :func:`check` refuses, before anything
starts, a configuration that does not fit; :func:`plan` lists every configuration with its bytes
and its predicted step time, and :func:`choose` returns the fitting one
with the most tokens/s. The step time is a no-overlap upper bound:
hardware FLOPs (recomputation included, :func:`labkit.predict.model.flops.
hardware_flops`) at ``flops_per_s`` plus the bytes each rank sends on a
ring (:func:`labkit.predict.collectives.ring_bytes_sent` of the calls of
:func:`labkit.predict.sharding.accumulation.step_calls`) at ``link_bytes_per_s``.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from labkit.predict import activations as A
from labkit.predict.sharding.accumulation import step_calls
from labkit.predict.model.flops import hardware_flops
from labkit.predict.memory import gpt_params, ledger

STRATEGIES = ("ddp", "fsdp2_full")
ZERO = {"ddp": "ddp", "fsdp2_full": "full_shard"}


# -- the model: the course's GPT by its sizes, or an architecture record
# (``{"arch": arch.preset("llama3-8b"), "seq": 8192}``), read the same way

def _full(model: dict) -> dict:
    m = {"mlp_ratio": 4, **model}
    a = m.get("arch")
    if isinstance(a, str):   # a lab's model dict: "gpt" or "llama"
        from labkit.predict.model.arch import of_shape
        a = m["arch"] = None if a == "gpt" else of_shape(
            m["layers"], m["hidden"], m["heads"], m["vocab"], m["seq"],
            m["mlp_ratio"], a)
    if a is not None:
        m.update(layers=a.layers, hidden=a.hidden, heads=a.heads,
                 vocab=a.vocab)
    return m


def _psi(m: dict) -> int:
    if m.get("arch") is not None:
        from labkit.predict.model import params as P
        return P.total(m["arch"])
    return gpt_params(m["layers"], m["hidden"], m["heads"], m["vocab"],
                      m["seq"], m["mlp_ratio"])


def _units(m: dict) -> list:
    if m.get("arch") is not None:
        from labkit.predict.mesh.arch import unit_shapes as arch_units
        return arch_units(m["arch"], 1)
    return unit_shapes(m["layers"], m["hidden"], m["heads"], m["vocab"],
                       m["seq"], m["mlp_ratio"])


def _saved(m: dict, batch: int, precision: str, rc: str, device: str,
           block: bool = False, strided_targets: bool = True) -> list:
    """The activation ledger of the model (one block, or all of it)."""
    if m.get("arch") is not None:
        from labkit.predict.activations import arch as AA
        if block:
            return AA.block_saved(m["arch"], batch, m["seq"], precision, rc,
                                  device=device)
        return AA.saved(m["arch"], m["seq"], batch, precision, rc,
                        strided_targets, device=device)
    if block:
        return A.block_saved(batch, m["seq"], m["hidden"], m["heads"],
                             m["mlp_ratio"], precision, rc, device)
    return A.saved(m["layers"], m["hidden"], m["heads"], m["vocab"],
                   m["seq"], batch, m["mlp_ratio"], precision, rc, device,
                   strided_targets)


def _hardware_flops(m: dict, batch: int, rc: str) -> float:
    if m.get("arch") is not None:
        from labkit.predict.model.flops_arch import arch_flops
        return arch_flops(m["arch"], batch, m["seq"], rc)["hardware_flops"]
    return hardware_flops(batch, m["seq"], m["layers"], m["hidden"],
                          m["vocab"], rc)


# -- the same, by the model: what a lab calls with its ``model`` dict

def saved(model: dict, micro_batch: int, precision: str = "fp32",
          recompute: str = "none", device: str = "cpu",
          strided_targets: bool = True) -> list:
    """What the forward of one micro-batch keeps for backward, tensor by
    tensor (:mod:`labkit.predict.activations.arch`; the GPT's
    :mod:`labkit.predict.activations` is that ledger on its preset)."""
    return _saved(_full(model), micro_batch, precision, recompute, device,
                  strided_targets=strided_targets)


def units(model: dict) -> list:
    """Parameter shapes of each FSDP unit (embedding, blocks, head)."""
    return _units(_full(model))


def step_flops(model: dict, batch: int, recompute: str = "none") -> float:
    """Hardware FLOPs of one training step of ``batch`` sequences
    (:func:`labkit.predict.model.flops.hardware_flops`; recomputation's
    second forward under ``full``)."""
    return _hardware_flops(_full(model), batch,
                           "full" if recompute == "full" else "none")


def recompute_flop_ratio(model: dict, recompute: str) -> float:
    """Hardware FLOPs of a step under ``recompute`` over those without:
    full recomputation runs every block's forward twice; selective
    recomputes no matmul (Korthikanti et al. 2022, Sec. 5)."""
    m = _full(model)
    rc = "full" if recompute == "full" else "none"
    return _hardware_flops(m, 1, rc) / _hardware_flops(m, 1, "none")


def unit_shapes(layers, hidden, heads, vocab, seq, mlp_ratio=4) -> list:
    """Parameter shapes of each FSDP unit of labkit.nn.model.GPT, in order."""
    h, r = hidden, mlp_ratio
    block = [(h,), (h,), (3 * h, h), (3 * h,), (h, h), (h,), (h,), (h,),
             (r * h, h), (r * h,), (h, r * h), (h,)]
    return [[(vocab, h), (seq, h)]] + [block] * layers + [[(h,), (h,),
                                                           (vocab, h)]]


@dataclass(frozen=True)
class Config:
    strategy: str
    recompute: str
    micro_batch: int
    accumulation: int


def _ring_factor(op: str, n: int) -> float:
    if n == 1:
        return 0.0
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def per_rank_bytes(model: dict, world_size: int, cfg: Config,
                   precision: str = "fp32", device: str = "cpu") -> dict:
    """Bytes one rank holds at its peak, term by term (see module doc)."""
    if cfg.strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {cfg.strategy!r}: {STRATEGIES}")
    m = _full(model)
    psi = _psi(m)
    states = ledger(psi, world_size, ZERO[cfg.strategy],
                    precision="fp32").gpu_total
    if cfg.strategy == "ddp" and precision == "fsdp_bf16":
        precision = "autocast_bf16"   # DDP's bf16 is autocast
    acts = A.total(_saved(m, cfg.micro_batch, precision, cfg.recompute,
                          device))
    param_bytes = 2 if precision != "fp32" else 4
    if cfg.strategy == "ddp":
        transient = 4 * psi
    else:
        units = _units(m)
        big = max(sum(math.prod(s) for s in u) for u in units)
        transient = 2 * big * param_bytes + 4 * big
    if cfg.recompute != "none":  # backward re-materialises one block
        block = [_saved(m, cfg.micro_batch, precision, rc, device, True)
                 for rc in ("none", cfg.recompute)]
        transient += A.total(block[0]) - A.total(block[1])
    total = states + acts + transient
    if cfg.strategy == "ddp" and cfg.accumulation == 1:
        # one micro-batch, gradients set to None after the step: at the
        # end of the forward (the activations' peak) no gradient exists
        # yet, only DDP's buckets; by the end of the backward the
        # gradients are there and the activations gone
        grads = 4 * psi
        total = states + transient + max(acts - grads, 0)
    return {"params": psi, "states": states, "activations": acts,
            "transient": transient, "total": total}


def step_seconds(model: dict, world_size: int, global_batch: int,
                 cfg: Config, flops_per_s: float, link_bytes_per_s: float,
                 precision: str = "fp32") -> dict:
    """Predicted seconds of one step, no overlap (an upper bound)."""
    m = _full(model)
    rc = "full" if cfg.recompute == "full" else "none"  # selective keeps
    flops = _hardware_flops(m, global_batch, rc) / world_size  # matmuls
    calls = step_calls(_units(m), world_size, cfg.strategy,
                       cfg.accumulation, no_sync=cfg.strategy == "ddp",
                       param_bytes=2 if precision != "fp32" else 4,
                       grad_bytes=4)
    wire = sum(c["bytes"] * _ring_factor(c["op"], world_size) for c in calls)
    t = flops / flops_per_s + wire / link_bytes_per_s
    return {"flops": flops, "wire_bytes": wire, "step_s": t,
            "tokens_per_s": global_batch * m["seq"] / t}


HEADROOM = 0.8


def plan(model: dict, world_size: int, global_batch: int,
         budget_bytes: float, flops_per_s: float, link_bytes_per_s: float,
         precision: str = "fp32", device: str = "cpu",
         strategies=STRATEGIES, recomputes=A.RECOMPUTE,
         headroom: float = HEADROOM) -> list[dict]:
    """Every configuration: bytes, fits or not, predicted speed."""
    if not budget_bytes > 0 or not 0 < headroom <= 1:
        raise ValueError("budget_bytes must be > 0 and headroom in (0, 1]")
    if global_batch % world_size:
        raise ValueError(f"global batch {global_batch} does not divide by "
                         f"{world_size} ranks")
    local = global_batch // world_size
    rows = []
    for s in strategies:
        for rc in recomputes:
            for mb in (d for d in range(1, local + 1) if local % d == 0):
                cfg = Config(s, rc, mb, local // mb)
                mem = per_rank_bytes(model, world_size, cfg, precision,
                                     device)
                speed = step_seconds(model, world_size, global_batch, cfg,
                                     flops_per_s, link_bytes_per_s,
                                     precision)
                rows.append({**asdict(cfg), **mem, **speed,
                             "budget": budget_bytes,
                             "fits": mem["total"] <= headroom * budget_bytes})
    return rows


def job_verdict(model: dict, world_size: int, row: dict, gpu_mem: float,
                **floor_kw) -> dict:
    """The whole job of an FSDP2 row of :func:`plan` as ``labkit memory
    --framework fsdp2`` prices it (:func:`labkit.predict.memory.job.job`):
    the ledger, FSDP2's named terms (the unsharded and prefetched unit,
    the unit's fp32 gradient: the row's transients), the activations and
    the re-materialised block, and the runtime floor; its ``sentence``
    says the headroom per GPU."""
    from labkit.predict.memory.job import job
    if row["strategy"] != "fsdp2_full":
        raise ValueError("job_verdict prices FSDP2 rows")
    m = _full(model)
    big = max(sum(math.prod(s) for s in u) for u in _units(m))
    units = 2 * 2 * big + 4 * big      # fsdp_bf16: 16-bit units
    out = job(row["params"], world_size, "zero3", gpu_mem=gpu_mem,
              framework="fsdp2", sizes={"largest_unit": big},
              activations=row["activations"] + row["transient"] - units,
              floor_kw=floor_kw or None)
    out["terms_gpu"] = sum(t["gpu"] for t in out["framework"])
    return out


def choose(rows) -> dict:
    """The fitting configuration with the most predicted tokens/s (ties:
    the larger micro-batch, then no recompute before selective)."""
    ok = [r for r in rows if r["fits"]]
    if not ok:
        raise ValueError("no configuration fits the budget: add ranks, "
                         "offload, or shrink the model")
    order = {rc: i for i, rc in enumerate(A.RECOMPUTE)}
    return max(ok, key=lambda r: (round(r["tokens_per_s"], 6),
                                  r["micro_batch"], -order[r["recompute"]]))


def check(model: dict, world_size: int, cfg: Config, budget_bytes: float,
          precision: str = "fp32", device: str = "cpu",
          headroom: float = HEADROOM) -> dict:
    """Refuse a configuration over budget before any process starts."""
    mem = per_rank_bytes(model, world_size, cfg, precision, device)
    if mem["total"] > headroom * budget_bytes:
        raise ValueError(
            f"{cfg.strategy}, recompute={cfg.recompute}, micro-batch "
            f"{cfg.micro_batch}: predicted {mem['total']:,.0f} bytes per "
            f"rank (states {mem['states']:,.0f} + activations "
            f"{mem['activations']:,.0f} + transient {mem['transient']:,.0f})"
            f" > {headroom:g} x budget {budget_bytes:,.0f}: not launched")
    return mem


GPU8 = {"model": {"layers": 32, "hidden": 4096, "heads": 32,
                  "vocab": 32000, "seq": 4096},
        "world_size": 8, "global_batch": 32, "budget_bytes": 80e9,
        "flops_per_s": 989e12 * 0.4, "link_bytes_per_s": 450e9}

if __name__ == "__main__":
    g = GPU8
    rows = plan(g["model"], g["world_size"], g["global_batch"],
                g["budget_bytes"], g["flops_per_s"], g["link_bytes_per_s"],
                precision="fsdp_bf16", device="cuda")
    for r in rows:
        print(f"{r['strategy']:11s} {r['recompute']:9s} mb {r['micro_batch']}"
              f" {r['total'] / 1e9:8.1f} GB {'fits' if r['fits'] else '-':5s}"
              f" {r['tokens_per_s']:10,.0f} tok/s")
    print("chosen:", choose(rows))
