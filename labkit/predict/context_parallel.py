"""Context parallelism: bytes, activation memory and causal load balance.

    from labkit.predict import context_parallel as CP
    CP.ring_bytes(batch=1, seq=131072, hidden=16384, cp=16, elem=2)
    CP.ulysses_bytes(1, 131072, 16384, cp=16, elem=2)
    CP.causal_work(cp=4, balanced=False)   # query-key pairs per rank

Context parallelism (CP) splits the *sequence* of every layer's attention
over ``p`` ranks; everything else in a layer is per token and needs no
communication. Two ways (:mod:`labkit.runs.cp_attention`):

- ring attention (Liu et al. 2023): K and V, ``2 b (s/p) h`` elements per
  rank, go round the ring ``p - 1`` times forward; backward sends them
  ``p - 1`` times again and the travelling dK/dV ``p`` times. Point to
  point: each send has a matching receive of the same size on the next
  rank;
- Ulysses (Jacobs et al. 2023, Sec. 3.1): four all-to-alls forward (Q, K,
  V to whole sequences of ``heads/p`` heads, the output back) and four
  backward, each of ``b (s/p) h`` elements per rank.

Activation memory of the attention: a blockwise (FlashAttention-style)
kernel saves ``q, k, v, out`` and one log-sum-exp per row; per rank that
is ``4 b (s/p) h`` elements plus ``b a s/p`` floats: ``1/p`` of one
process's.

Causal masking and load balance: with contiguous chunks rank ``r``
computes ``r + 1`` of the ``p`` blocks (the others are masked out
entirely), so the slowest rank does ``2p/(p + 1)`` times the mean; the
zigzag order (chunks ``r`` and ``2p - 1 - r`` of ``2p``; Dubey et al.
2024, Sec. 3.3.2) gives every rank ``2p + 1`` half-size blocks.
"""
from __future__ import annotations


def _positive(**kw) -> None:
    for name, v in kw.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")


def _check(batch, seq, hidden, cp, elem):
    _positive(batch=batch, seq=seq, hidden=hidden, cp=cp, elem=elem)
    if seq % cp:
        raise ValueError(f"seq {seq} does not divide by cp={cp}")


def ring_bytes(batch: int, seq: int, hidden: int, cp: int,
               elem: int = 2) -> dict:
    """``{"send": {calls, bytes}, "recv": {...}}`` one rank, one layer,
    forward + backward (K and V sent as one ``[2, b, heads, s/p, d]``
    tensor)."""
    _check(batch, seq, hidden, cp, elem)
    if cp == 1:
        return {}
    kv = 2 * batch * seq // cp * hidden * elem
    calls = (cp - 1) + (cp - 1) + cp   # K/V fwd, K/V bwd, dK/dV bwd
    one = {"calls": calls, "bytes": calls * kv}
    return {"send": dict(one), "recv": dict(one)}


def ulysses_bytes(batch: int, seq: int, hidden: int, cp: int,
                  elem: int = 2) -> dict:
    """``{"all_to_all": {calls, bytes}}`` one rank, one layer, forward +
    backward (payload: the input of each all-to-all)."""
    _check(batch, seq, hidden, cp, elem)
    if cp == 1:
        return {}
    one = batch * seq // cp * hidden * elem
    return {"all_to_all": {"calls": 8, "bytes": 8 * one}}


def saved_bytes(batch: int, seq: int, hidden: int, heads: int, cp: int,
                elem: int = 4, lse_elem: int | None = None) -> int:
    """Bytes the attention keeps for backward on one rank: ``q, k, v,
    out`` (``4 b (s/p) h``) and the row log-sum-exp (``b a s/p``)."""
    _check(batch, seq, hidden, cp, elem)
    lse_elem = elem if lse_elem is None else lse_elem
    rows = batch * seq // cp
    return 4 * rows * hidden * elem + rows * heads * lse_elem


def causal_work(cp: int, balanced: bool, seq: int | None = None) -> list:
    """Query-key pairs each rank computes under a causal mask, in units
    of ``(s / 2p)^2`` (or exact pairs when ``seq`` is given): blocks
    entirely above the diagonal are skipped, diagonal blocks computed in
    full and masked."""
    _positive(cp=cp)
    unit = 1 if seq is None else (seq // (2 * cp)) ** 2
    if balanced:   # chunks r and 2p-1-r: (r + 1) + (2p - r) half blocks
        return [(2 * cp + 1) * unit] * cp
    return [4 * (r + 1) * unit for r in range(cp)]


def imbalance(work: list) -> float:
    """Slowest rank over the mean: what the ring waits for."""
    return max(work) / (sum(work) / len(work))


def full_work(cp: int, causal: bool, seq: int | None = None) -> list:
    """Pairs per rank without a mask: every rank all ``p`` blocks."""
    _positive(cp=cp)
    unit = 1 if seq is None else (seq // (2 * cp)) ** 2
    return ([4 * cp * unit] * cp if not causal
            else causal_work(cp, False, seq))
