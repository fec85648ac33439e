"""Optimizer state under sharding: bytes per rank, and Muon's traffic.

    from labkit.predict import optimizers as O
    ts = O.gpt_tensors(layers=2, hidden=64, vocab=256, seq=32)
    O.state_bytes("adamw", ts, world_size=2)     # optimizer.state, per rank
    O.muon_traffic(ts, world_size=2, mode="gather")   # the counter's bytes
    O.bytes_per_param("adamw8bit")               # the ledger's K, large

Each formula counts what the optimizer's own ``state`` dict holds, tensor
by tensor, on one rank of FSDP2 (``fully_shard``: every parameter split
along dim 0, rows ``m / world_size`` per rank):

- ``adamw`` (``torch.optim.AdamW``; Loshchilov & Hutter 2019): momentum
  and variance, 4 + 4 bytes per element, and a 4-byte ``step`` per tensor.
  With mixed precision the ledger adds the fp32 master copy: K = 12
  (Rajbhandari et al. 2020, ZeRO Sec. 3.1).
- ``adafactor`` (``torch.optim.Adafactor``; Shazeer & Stern 2018, Sec. 3,
  eq. 4-5): a matrix ``m x n`` keeps a row factor ``R`` (m) and a column
  factor ``C`` (n) of its second moment, ``V ~ R C / sum(R)``, not ``m n``;
  a vector keeps its full second moment; no momentum; a 4-byte ``step``.
  On a shard the row factor has the shard's rows and the column factor
  all ``n`` columns: the column factor is not divided by the ranks.
- ``adamw8bit`` (bitsandbytes ``AdamW8bit``; Dettmers et al. 2022, Sec. 2,
  block-wise quantization): both states as uint8 codes (1 + 1 byte per
  element), one fp32 absmax per block of 256 elements per state, and the
  256-entry fp32 dynamic quantization map per state (2 KiB per tensor);
  tensors under 4096 elements (``min_8bit_size``) keep fp32 states. It
  sees the rank's shard, so the rule applies to the shard's size.
- ``muon`` (``torch.optim.Muon``; Jordan et al. 2024): one fp32 momentum
  buffer per hidden matrix, no ``step``; embeddings, the output layer and
  every vector go to AdamW, as Jordan's recipe says.

Muon's update orthogonalises a whole matrix (Newton-Schulz, 5 quintic
iterations on the momentum), so a matrix split by rows must be put back
together first. Two ways, each counted as the course's collective counter
counts (``labkit.measure.collectives``: the logical payload of one call):

- ``gather`` (Liu et al. 2025, "Muon is Scalable", Sec. 2.3, Distributed
  Muon): every rank all-gathers every matrix's update, runs Newton-Schulz
  on all of them and keeps its rows: one all-gather of ``4 m n`` bytes per
  matrix, and every rank does every matrix's iterations.
- ``dealt``: matrix ``i`` belongs to rank ``i mod world_size``; the ranks
  gather its shards to that rank (``4 m n``), it alone runs Newton-Schulz,
  and scatters the rows back (``4 m n``). Twice the counted payload, but
  on the wire each rank receives ``2 (N-1) / N^2`` of a matrix on average
  instead of ``(N-1) / N``, and does a ``1 / N`` share of the iterations.

Pure Python: no torch.
"""
from __future__ import annotations

import math

OPTIMIZERS = ("adamw", "adafactor", "adamw8bit", "muon")
MUON_MODES = ("gather", "dealt")
FP32 = 4
BLOCK = 256            # bitsandbytes' block size of 8-bit Adam's states
QMAP = 256             # entries of its dynamic quantization map (fp32)
MIN_8BIT = 4096        # bitsandbytes' min_8bit_size: smaller stay fp32
NS_STEPS = 5           # torch.optim.Muon's Newton-Schulz iterations


def gpt_tensors(layers: int, hidden: int, vocab: int, seq: int,
                mlp_ratio: int = 4) -> list:
    """``(name, shape, muon)`` of the course's tiny GPT (``labkit.nn``,
    GPT layout: fused QKV, biases, learned positions, untied head), in
    ``named_parameters`` order; ``muon`` marks a hidden matrix."""
    h, f = hidden, mlp_ratio * hidden
    out = [("embed.tok.weight", (vocab, h), False),
           ("embed.pos.weight", (seq, h), False)]
    for i in range(layers):
        p = f"blocks.{i}"
        for name, shape in (("ln1.weight", (h,)), ("ln1.bias", (h,)),
                            ("attn.qkv.weight", (3 * h, h)),
                            ("attn.qkv.bias", (3 * h,)),
                            ("attn.proj.weight", (h, h)),
                            ("attn.proj.bias", (h,)),
                            ("ln2.weight", (h,)), ("ln2.bias", (h,)),
                            ("mlp.fc.weight", (f, h)),
                            ("mlp.fc.bias", (f,)),
                            ("mlp.proj.weight", (h, f)),
                            ("mlp.proj.bias", (h,))):
            out.append((f"{p}.{name}", shape, len(shape) == 2))
    out += [("head.ln_f.weight", (h,), False),
            ("head.ln_f.bias", (h,), False),
            ("head.out.weight", (vocab, h), False)]
    return out


def shard(shape: tuple, world_size: int) -> tuple:
    """A rank's shard of ``shape`` under ``fully_shard`` (dim 0 split)."""
    if shape[0] % world_size:
        raise ValueError(f"dim 0 of {shape} does not divide by "
                         f"{world_size} ranks: shards would be uneven")
    return (shape[0] // world_size, *shape[1:])


def numel(shape: tuple) -> int:
    return math.prod(shape)


def tensor_state(optimizer: str, shape: tuple, muon: bool = False) -> int:
    """Bytes of ``optimizer.state[p]`` for one tensor ``p`` of ``shape``
    (the rank's shard), every tensor in it counted (``step`` too)."""
    n = numel(shape)
    if optimizer == "muon":
        return FP32 * n if muon else tensor_state("adamw", shape)
    if optimizer == "adamw":
        return 2 * FP32 * n + FP32                  # m, v, step
    if optimizer == "adafactor":
        if len(shape) < 2:
            return FP32 * n + FP32                  # variance, step
        rows, cols = numel(shape[:-1]), numel(shape[:-2]) * shape[-1]
        return FP32 * (rows + cols) + FP32          # R, C, step
    if optimizer == "adamw8bit":
        if n < MIN_8BIT:
            return 2 * FP32 * n                     # step is an int
        return 2 * (n + FP32 * math.ceil(n / BLOCK) + FP32 * QMAP)
    raise ValueError(f"unknown optimizer {optimizer!r}: one of "
                     f"{', '.join(OPTIMIZERS)}")


def state_bytes(optimizer: str, tensors: list, world_size: int = 1) -> int:
    """Bytes of ``optimizer.state`` on one rank of ``world_size`` under
    FSDP2, for ``tensors`` as :func:`gpt_tensors` lists them."""
    return sum(tensor_state(optimizer, shard(s, world_size), m)
               for _, s, m in tensors)


def bytes_per_param(optimizer: str, precision: str = "mixed") -> float:
    """The ledger's K for large matrices (``m, n`` -> infinity): state
    bytes per parameter, plus the fp32 master copy under mixed precision.
    Adafactor's ``4 (m + n) / (m n)`` and 8-bit Adam's absmax ``8 / 256``
    are what is left of the factored and quantised states."""
    k = {"adamw": 8.0, "adafactor": 0.0, "adamw8bit": 2 + 2 * FP32 / BLOCK,
         "muon": 4.0}
    if optimizer not in k:
        raise ValueError(f"unknown optimizer {optimizer!r}")
    return k[optimizer] + (FP32 if precision == "mixed" else 0)


def muon_traffic(tensors: list, world_size: int, mode: str) -> dict:
    """What one rank issues per step to put Muon's matrices together:
    ``{op: {"calls", "bytes"}}`` as the collective counter reports it,
    plus ``received``: bytes this rank receives on average (a ring
    all-gather, a direct gather and scatter) and ``ns_flops``: its share
    of the Newton-Schulz iterations (:func:`ns_flops`)."""
    if mode not in MUON_MODES:
        raise ValueError(f"unknown mode {mode!r}: one of "
                         f"{', '.join(MUON_MODES)}")
    mats = [s for _, s, m in tensors if m]
    n, w = len(mats), world_size
    full = sum(FP32 * numel(s) for s in mats)
    flops = [ns_flops(s) for s in mats]
    if w == 1:
        return {"ops": {}, "received": 0, "ns_flops": sum(flops)}
    if mode == "gather":
        return {"ops": {"all_gather": {"calls": n, "bytes": full}},
                "received": full * (w - 1) / w, "ns_flops": sum(flops)}
    return {"ops": {"gather": {"calls": n, "bytes": full},
                    "scatter": {"calls": n, "bytes": full}},
            "received": 2 * full * (w - 1) / w ** 2,
            "ns_flops": sum(flops) / w}


def ns_flops(shape: tuple, steps: int = NS_STEPS) -> int:
    """Multiply-add FLOPs of Newton-Schulz on an ``m x n`` matrix
    (Jordan et al. 2024; torch.optim.Muon transposes so that m <= n):
    each iteration ``A = X X^T`` (2 m^2 n), ``B = b A + c A A`` (2 m^3),
    ``X = a X + B X`` (2 m^2 n)."""
    m, n = sorted(shape[:2])
    return steps * (4 * m * m * n + 2 * m ** 3)


def owner(i: int, world_size: int) -> int:
    """The rank that runs matrix ``i``'s iterations in ``dealt``."""
    return i % world_size
