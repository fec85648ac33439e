"""Context parallelism: bytes, activation memory and causal load balance.

    from labkit.predict import context_parallel as CP
    CP.ring_bytes(batch=1, seq=131072, hidden=16384, cp=16, elem=2)
    CP.ulysses_bytes(1, 131072, 16384, cp=16, elem=2)
    CP.causal_work(cp=4, balanced=False)   # query-key pairs per rank
    CP.ring(arch.preset("llama3.1-405b"), batch=1, seq=131072, cp=16)

Context parallelism (CP) splits the *sequence* of every layer's attention
over ``p`` ranks; everything else in a layer is per token and needs no
communication. Two ways (:mod:`labkit.runs.blocks.cp_attention`):

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

Grouped-query attention (Ainslie et al. 2023): K and V have ``kv_heads``
heads of ``head_dim``, so their width ``kv_hidden = kv_heads x head_dim``
is ``heads / kv_heads`` times smaller than the queries' (Llama 3 405B: 8
KV heads of 128 query heads, 16x). Ring attention sends only K and V:
``2 b (s/p) kv_hidden`` elements per hop. Ulysses sends Q and the output at
full width and K, V at ``kv_hidden``; this module's Ulysses (like
DeepSpeed's ``DistributedAttention``) splits whole *KV* heads over the
ranks: ``p <= kv_heads`` (DeepSpeed's ``UlyssesSPAttentionHF`` replicates
KV heads past that; its limit is the query heads). The saved ``k, v``
shrink the same way. The record-based calls :func:`ring`,
:func:`ulysses` and :func:`saved` read these widths from a
:class:`labkit.arch.Arch`.

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
               elem: int = 2, kv_hidden: int | None = None) -> dict:
    """``{"send": {calls, bytes}, "recv": {...}}`` one rank, one layer,
    forward + backward (K and V sent as one ``[2, b, kv_heads, s/p, d]``
    tensor; ``kv_hidden`` = kv_heads x head_dim, default ``hidden``)."""
    _check(batch, seq, hidden, cp, elem)
    kv_hidden = hidden if kv_hidden is None else kv_hidden
    _positive(kv_hidden=kv_hidden)
    if cp == 1:
        return {}
    kv = 2 * batch * seq // cp * kv_hidden * elem
    calls = (cp - 1) + (cp - 1) + cp   # K/V fwd, K/V bwd, dK/dV bwd
    one = {"calls": calls, "bytes": calls * kv}
    return {"send": dict(one), "recv": dict(one)}


def ulysses_bytes(batch: int, seq: int, hidden: int, cp: int,
                  elem: int = 2, kv_hidden: int | None = None,
                  kv_heads: int | None = None) -> dict:
    """``{"all_to_all": {calls, bytes}}`` one rank, one layer, forward +
    backward (payload: the input of each all-to-all). Forward: Q and the
    output at ``hidden``, K and V at ``kv_hidden``; backward the same
    four gradients. ``kv_heads``: Ulysses gives each rank whole K/V heads,
    so ``cp`` must divide them (p <= KV heads)."""
    _check(batch, seq, hidden, cp, elem)
    kv_hidden = hidden if kv_hidden is None else kv_hidden
    _positive(kv_hidden=kv_hidden)
    if kv_heads is not None and kv_heads % cp:
        raise ValueError(f"Ulysses needs cp ({cp}) to divide the "
                         f"{kv_heads} KV heads (p <= KV heads)")
    if cp == 1:
        return {}
    rows = batch * seq // cp
    one = rows * (2 * hidden + 2 * kv_hidden) * elem   # q, out, k, v
    return {"all_to_all": {"calls": 8, "bytes": 2 * one}}


def saved_bytes(batch: int, seq: int, hidden: int, heads: int, cp: int,
                elem: int = 4, lse_elem: int | None = None,
                kv_hidden: int | None = None) -> int:
    """Bytes the attention keeps for backward on one rank: ``q, out``
    (``2 b (s/p) h``), ``k, v`` (``2 b (s/p) kv_hidden``, default ``h``)
    and the row log-sum-exp (``b a s/p``)."""
    _check(batch, seq, hidden, cp, elem)
    kv_hidden = hidden if kv_hidden is None else kv_hidden
    _positive(kv_hidden=kv_hidden)
    lse_elem = elem if lse_elem is None else lse_elem
    rows = batch * seq // cp
    return (2 * rows * (hidden + kv_hidden) * elem
            + rows * heads * lse_elem)


# -- the same, read from an architecture record (labkit.arch) --------------

def ring(a, batch: int, seq: int, cp: int, elem: int = 2) -> dict:
    """:func:`ring_bytes` for the record ``a`` (its K/V width)."""
    return ring_bytes(batch, seq, a.q_dim, cp, elem, kv_hidden=a.kv_dim)


def ulysses(a, batch: int, seq: int, cp: int, elem: int = 2) -> dict:
    """:func:`ulysses_bytes` for ``a``; ValueError when cp > KV heads."""
    return ulysses_bytes(batch, seq, a.q_dim, cp, elem, kv_hidden=a.kv_dim,
                         kv_heads=a.kv_heads)


def ulysses_max(a) -> int:
    """The largest context-parallel size of this module's Ulysses (whole
    KV heads per rank): the KV heads."""
    return a.kv_heads


def saved(a, batch: int, seq: int, cp: int, elem: int = 2,
          lse_elem: int = 4) -> int:
    """:func:`saved_bytes` for ``a`` (bf16 tensors, fp32 log-sum-exp)."""
    return saved_bytes(batch, seq, a.q_dim, a.heads, cp, elem, lse_elem,
                       kv_hidden=a.kv_dim)


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
