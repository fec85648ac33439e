"""Rooflines: how long an op takes from its FLOPs and bytes (pure Python).

    from labkit.predict import roofline as R
    R.ridge(R.chip("h100"))                   # ~295 FLOPs per byte
    ops = R.step_ops(batch=8, seq=128, layers=2, hidden=192, heads=4,
                     vocab=256)
    R.predict(ops, peak=989e12, bandwidth=3.35e12)["step_s"]

The roofline (Williams, Waterman & Patterson 2009, "Roofline: an
insightful visual performance model for multicore architectures", CACM
52(4), Fig. 1): an op that does ``F`` FLOPs and moves ``B`` bytes between
memory and the chip takes at least ``max(F / peak, B / bandwidth)``; its
arithmetic intensity ``I = F / B`` decides which term wins, and the
*ridge point* ``peak / bandwidth`` is the intensity where they are equal.
"How to Scale Your Model" (Austin et al. 2025, ch. 1, "All about
rooflines") writes the same bound as ``T >= max(T_math, T_comms)`` and
applies it to links as well as to memory: a collective hides under
compute when the compute takes longer than the bytes on the link
(:func:`fsdp_tokens`, :func:`dp_tokens`, :func:`tp_max`).

:func:`step_ops` lists every op of one training step of the course's GPT
(:mod:`labkit.nn.model`, fp32 by default) with its FLOPs and bytes: the
matmuls by shape (2 m k n FLOPs, Narayanan et al. 2021, Sec. 5.1), the
attention core (4 b s^2 h forward), norms, GELU, residual adds, the
cross-entropy, the embedding and AdamW. Backward is two matmuls per
forward matmul and one pass of reads and writes per elementwise op.
:func:`step_time` is the one step-time model: compute per op from the
roofline (or a measured efficiency of the peak per kind of op), plus the
communication that compute does not hide (the overlap rules of
:mod:`labkit.predict.sharding.timing`).
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.predict.gpus import PEAKS

TB = 1e12
# (dense bf16 FLOP/s, HBM bytes/s, source): the data sheets.
CHIPS = {
    "a100": (PEAKS["a100"][0] * 1e12, 2.039 * TB,
             PEAKS["a100"][1] + "; A100 80GB SXM: HBM2e 2,039 GB/s"),
    "h100": (PEAKS["h100"][0] * 1e12, 3.35 * TB,
             PEAKS["h100"][1] + "; H100 SXM datasheet: HBM3 3.35 TB/s"),
    "h200": (PEAKS["h200"][0] * 1e12, 4.8 * TB,
             PEAKS["h200"][1] + "; H200 SXM datasheet: HBM3e 4.8 TB/s"),
    "mi300x": (1307.4e12, 5.3 * TB,
               "AMD Instinct MI300X datasheet: BF16 1,307.4 TFLOPS dense "
               "(2,614.9 with sparsity), HBM3 5.3 TB/s"),
    "h800": (989.4e12, 3.35 * TB,
             "NVIDIA H800 SXM: H100's compute and HBM3 (3.35 TB/s), "
             "NVLink cut to 400 GB/s (DeepSeek-V3 report, Sec. 3.1)"),
}


# the GPU-to-GPU link of each chip's 8-GPU node, bytes/s per direction
# (labkit.predict.collectives.LINKS where the course has it)
LINKS = {"a100": (300e9, "NVLink3, 600 GB/s both directions"),
         "h100": (450e9, "NVLink4, 900 GB/s both directions"),
         "h200": (450e9, "NVLink4, 900 GB/s both directions"),
         "mi300x": (448e9, "AMD MI300X datasheet: 7 Infinity Fabric "
                    "links, 896 GB/s aggregate both directions"),
         "h800": (200e9, "H800: NVLink 400 GB/s both directions "
                  "(DeepSeek-V3 report, Sec. 3.1)")}


def chip(name: str) -> tuple[float, float]:
    """(peak FLOP/s, bandwidth bytes/s) of a data-sheet chip."""
    if name not in CHIPS:
        raise ValueError(f"unknown chip {name!r}: one of "
                         f"{', '.join(sorted(CHIPS))}")
    return CHIPS[name][:2]


def ridge(peak_bw: tuple[float, float]) -> float:
    """The ridge point, FLOPs per byte: ``peak / bandwidth``."""
    peak, bw = peak_bw
    return peak / bw


def op_time(flops: float, nbytes: float, peak: float, bandwidth: float
            ) -> float:
    """``max(F / peak, B / bandwidth)`` (Williams et al. 2009)."""
    return max(flops / peak, nbytes / bandwidth)


def bound(flops: float, nbytes: float, peak: float, bandwidth: float
          ) -> str:
    """``"compute"`` above the ridge point, else ``"memory"``."""
    return "compute" if flops / peak >= nbytes / bandwidth else "memory"


@dataclass(frozen=True)
class Op:
    """``count`` runs of one op per step, each ``flops`` and ``nbytes``."""
    name: str
    kind: str          # matmul | attention | norm | elementwise | optimizer
    flops: float
    nbytes: float
    count: int = 1
    calls: int = 0     # framework calls per step, each at a fixed cost

    @property
    def intensity(self) -> float:
        return self.flops / self.nbytes if self.nbytes else float("inf")


def matmul(m: int, k: int, n: int, e: int = 4) -> tuple[float, float]:
    """(FLOPs, bytes) of ``(m, k) @ (k, n)``: 2 m k n multiply-adds, both
    inputs read and the output written once (``e`` bytes per value)."""
    return 2.0 * m * k * n, float(e * (m * k + k * n + m * n))


def _linear(name, tokens, d_in, d_out, e, count):
    # forward, input gradient, weight gradient: three matmuls of one cost
    f, b = matmul(tokens, d_in, d_out, e)
    return Op(name, "matmul", f, b, 3 * count, 3 * count)


# torch.optim.AdamW on CPU tensors (torch/optim/adam.py,
# _single_tensor_adam): per parameter tensor step += 1, the decay's mul_,
# lerp_, mul_, addcmul_, the step's item(), sqrt, div, add_, addcdiv_
ADAMW_CALLS = 10


def step_ops(batch: int, seq: int, layers: int, hidden: int, heads: int,
             vocab: int, mlp_ratio: int = 4, e: int = 4) -> list[Op]:
    """Every op of one training step of the GPT of :mod:`labkit.nn.model`
    (pre-LayerNorm, fused QKV, GELU MLP, learned positions, untied head,
    AdamW), every tensor ``e`` bytes (the loss in fp32). Counts are per
    step; backward's ops are folded into their forward's row."""
    t, h, f, v = batch * seq, hidden, mlp_ratio * hidden, vocab
    psi = layers * (4 * h * h + 2 * h * f + 9 * h + f) + v * h * 2 + \
        seq * h + 2 * h
    ce = 4   # the loss is taken in fp32 (labkit.nn.decoder: logits.float())
    # attention core, scaled_dot_product_attention: Q K^T and P V, 4 b s^2 h
    # forward (Narayanan et al. 2021, Sec. 5.1, no causal halving); the
    # backward does twice the forward's FLOPs and, being flash attention
    # (the CPU's and CUDA's fused kernels), recomputes S = Q K^T from the
    # saved log-sum-exp first: 2 b s^2 h more (Dao 2023, FlashAttention-2,
    # Algorithm 2, line 11), 3.5 forwards in all; bytes: q, k, v, out
    # forward, and those plus their gradients backward
    attn_f = 4.0 * batch * seq * seq * h
    tensors = 12 * layers + 5   # 12 a block (6 weights, 6 biases), wte,
    #                             wpe, the final norm's 2, the head
    return [
        _linear("qkv matmul", t, h, 3 * h, e, layers),
        _linear("attention out matmul", t, h, h, e, layers),
        _linear("mlp matmuls", t, h, f, e, 2 * layers),
        _linear("head matmul", t, h, v, e, 1),
        Op("attention core", "attention", 3.5 * attn_f,
           float(e * t * h * (4 + 8)), layers, 2 * layers),
        # read x, write y forward; read x, dy, write dx backward (+ stats)
        Op("layernorm", "norm", 8.0 * t * h, float(e * t * h * 5),
           2 * layers + 1, 2 * (2 * layers + 1)),
        Op("gelu", "elementwise", 10.0 * t * f, float(e * t * f * 5),
           layers, 2 * layers),
        # x + f(x) forward; the two gradients summed backward; bias grads
        Op("residual & bias", "elementwise", 2.0 * t * h,
           float(e * t * h * 6), 2 * layers, 2 * 2 * layers),
        # log-softmax and NLL on fp32 logits: read, write; backward 3 passes
        Op("cross-entropy", "elementwise", 5.0 * t * v,
           float(ce * t * v * 5), 1, 4),
        # gather t rows forward; backward zeroes V h and scatter-adds t rows
        Op("embedding", "elementwise", float(t * h),
           float(e * (4 * t * h + (v + seq) * h)), 1, 4),
        # AdamW: read p, g, m, v, write p, m, v (states in the model's
        # dtype, as torch.optim keeps them), ~15 FLOPs a value; its
        # temporaries (sqrt, div) are one tensor's size and stay in cache
        Op("adamw", "optimizer", 15.0 * psi, 7.0 * e * psi, 1,
           ADAMW_CALLS * tensors),
    ]


def predict(ops: list[Op], peak: float, bandwidth: float,
            efficiency: dict | None = None, call_s: float = 0.0) -> dict:
    """Each op's time on the roofline, and the step's (their sum).

    ``efficiency``: ``{op name or kind: fraction}`` of the peak an op
    reaches where it was measured (a calibrated roofline); ops absent
    from it use the roofline as it is. ``call_s``: the fixed cost of one
    framework call (Python, the dispatcher, autograd's bookkeeping),
    measured once (:func:`labkit.measure.roofline.call_overhead`): each
    op pays it ``calls`` times a step, on top of its roofline time."""
    eff = efficiency or {}
    rows = []
    for o in ops:
        p = peak * eff.get(o.name, eff.get(o.kind, 1.0))
        one = op_time(o.flops, o.nbytes, p, bandwidth)
        rows.append({"op": o.name, "kind": o.kind, "count": o.count,
                     "flops": o.flops * o.count,
                     "bytes": o.nbytes * o.count,
                     "intensity": o.intensity,
                     "bound": bound(o.flops, o.nbytes, p, bandwidth),
                     "overhead_s": o.calls * call_s,
                     "seconds": one * o.count + o.calls * call_s})
    return {"ops": rows, "step_s": sum(r["seconds"] for r in rows)}


# -- thresholds: the same bound applied to a link -------------------------

def fsdp_tokens(peak: float, link: float, ranks: int, e: int = 2) -> float:
    """Tokens per rank above which FSDP's all-gathers hide under compute.

    A unit of ``P`` parameters: its forward is ``2 P T`` FLOPs on ``T``
    tokens per rank; its all-gather moves ``(N-1)/N e P`` bytes per rank
    (ring, :mod:`labkit.predict.collectives`). Backward doubles both (4 P T
    FLOPs; all-gather + reduce-scatter). ``2 P T / peak >= (N-1)/N e P /
    link`` gives ``T >= (N-1)/N e peak / (2 link)``: the ridge point of
    the link (How to Scale Your Model, ch. 5, for FSDP)."""
    _ranks(ranks)
    return (ranks - 1) / ranks * e * peak / (2 * link)


def dp_tokens(peak: float, link: float, ranks: int, grad_bytes: int = 4
              ) -> float:
    """Tokens per rank above which DDP's gradient all-reduce hides under
    the backward: ``4 P T / peak >= 2 (N-1)/N g P / link``, so
    ``T >= (N-1)/N g peak / (2 link)`` -- the FSDP bound with gradient
    bytes ``g`` (fp32 gradients: twice bf16's)."""
    _ranks(ranks)
    return (ranks - 1) / ranks * grad_bytes * peak / (2 * link)


def dp_max_ranks(global_tokens: float, peak: float, link: float,
                 grad_bytes: int = 4, most: int = 1 << 20) -> int:
    """Where DP stops paying: the most ranks for which a global batch of
    ``global_tokens`` still leaves each rank enough tokens to hide its
    all-reduce (:func:`dp_tokens`); beyond it every added rank adds
    exposed communication."""
    n = 1
    while n < most and global_tokens / (n + 1) >= dp_tokens(
            peak, link, n + 1, grad_bytes):
        n += 1
    return n


def tp_tokens(peak: float, bandwidth: float, hidden: int, ffn: int,
              tp: int, e: int = 2) -> float | None:
    """Tokens ``T`` above which a TP-sharded matmul ``(T, h) @ (h, f/tp)``
    is compute-bound (its intensity reaches the ridge ``R``):
    ``2 T h n >= R e (T h + h n + T n)`` with ``n = f / tp``, so
    ``T >= R e h n / (2 h n - R e (h + n))``; None where no ``T`` does
    (the shard is too thin: the weight's bytes alone exceed the ridge)."""
    _ranks(tp)
    r, n = peak / bandwidth, ffn / tp
    den = 2 * hidden * n - r * e * (hidden + n)
    return r * e * hidden * n / den if den > 0 else None


def tp_max(peak: float, link: float, ffn: int, e: int = 2) -> int:
    """The largest TP degree whose activation all-reduces can hide under
    the MLP's matmuls: ``4 T h f / (tp peak)`` FLOPs-time against ring
    ``2 (tp-1)/tp T h e / link``: ``tp - 1 <= 2 f link / (peak e)``
    (independent of T; How to Scale Your Model, ch. 5, for TP). Assumes
    the all-reduce overlaps the next matmul (collective matmuls)."""
    return 1 + int(2 * ffn * link / (peak * e))


def expert_time(tokens: float, hidden: int, expert_ffn: int, peak: float,
                bandwidth: float, e: int = 2) -> dict:
    """One SwiGLU expert's forward + backward GEMMs on ``tokens`` tokens,
    priced on the roofline: ``seconds`` and ``efficiency`` (the fraction
    of the peak it can reach, FLOP time / roofline time). Few tokens per
    expert: the weights' bytes dominate and efficiency falls."""
    f, b = matmul(tokens, hidden, expert_ffn, e)
    t = 9 * op_time(f, b, peak, bandwidth)      # 3 matmuls x 3 passes
    return {"seconds": t, "flops": 9 * f, "intensity": f / b,
            "efficiency": 9 * f / peak / t}


def step_time(ops: list[Op], peak: float, bandwidth: float,
              comm: dict | None = None, efficiency: dict | None = None,
              call_s: float = 0.0) -> dict:
    """The step-time model: compute per op from :func:`predict`, plus the
    communication compute does not hide.

    ``comm``: seconds per phase (``forward``, ``backward``, ``step``), e.g.
    from :func:`labkit.predict.sharding.timing.comm_time`. Forward comm hides
    under the forward (a third of the non-optimizer compute), backward
    comm under the backward (two thirds); the optimizer phase hides
    nothing (the overlap rules of :func:`sharding_time.overlap`)."""
    p = predict(ops, peak, bandwidth, efficiency, call_s)
    opt = sum(r["seconds"] for r in p["ops"] if r["kind"] == "optimizer")
    work = p["step_s"] - opt
    hide = {"forward": work / 3, "backward": 2 * work / 3, "step": 0.0}
    comm = {k: (comm or {}).get(k, 0.0) for k in hide}
    exposed = {k: max(0.0, comm[k] - hide[k]) for k in hide}
    return {"compute_s": p["step_s"], "comm_s": sum(comm.values()),
            "exposed_s": sum(exposed.values()),
            "step_s": p["step_s"] + sum(exposed.values()), "ops": p["ops"],
            "by_phase": {k: {"compute_s": hide[k], "comm_s": comm[k],
                             "exposed_s": exposed[k]} for k in hide}}


def _ranks(n):
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"ranks must be an integer >= 1, got {n!r}")
