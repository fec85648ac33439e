"""Expert parallelism in numbers: capacity, drops, and the bytes through
each all-to-all (pure Python, no torch).

    from labkit.predict import experts as X
    X.capacity(1.25, top_k=2, tokens=4096, experts=8)   # 1280
    X.dropped([900, 1400, 1300, 1000, ...], 1280)
    X.all_to_all_bytes(kept, rank=0, ep=4, hidden=4096, elt=2)

Capacity (GShard, Lepikhin et al. 2020, Sec. 2.2; Switch, Fedus et al.
2022, Eq. 3): ``C = ceil(c k T / E)`` assignments per expert; an expert
routed ``n_e`` assignments drops ``max(0, n_e - C)`` of them.

The all-to-alls of one MoE layer on one rank of an EP group of ``ep``
ranks, experts ``E / ep`` per rank, rows of ``h`` values of ``elt`` bytes
(what :class:`labkit.measure.collectives.CollectiveCounter` records: the
input of ``all_to_all_single``, the rows a rank keeps for itself
included):

===================  ===========================  ======================
all-to-all           forward input                backward input
===================  ===========================  ======================
dispatch             ``S h elt`` (rows it sends)  ``R h elt``
combine              ``R h elt`` (rows it got)    ``S h elt``
===================  ===========================  ======================

``S`` = this rank's kept assignments, ``R`` = the assignments of all EP
ranks to this rank's experts; the counts themselves go first (``E`` int64
per rank, an all-to-all of their own) so that every rank can size its
receive buffer. With a uniform router ``S = R = k T`` and a fraction
``(ep - 1) / ep`` leaves the rank: the usual estimate ``k T h elt
(ep - 1) / ep`` per all-to-all (DeepSpeed-MoE, Rajbhandari et al. 2022,
Sec. 5; the exact figure needs the router's counts).

Model states per rank under EP x DP (:func:`states_per_rank`): a rank
holds ``E / ep`` of every MoE layer's routed experts (replicated over the
``dp`` ranks that share its EP index) and the dense part (embedding,
attention, norms, router, shared experts, head) whole when it is
replicated (DDP, as lab 13 runs it), or ``1 / W`` of it when FSDP shards
it over all ``W`` ranks; each parameter costs chapter 1's bytes per
parameter (ZeRO, Rajbhandari et al. 2020, Sec. 3.1: 2 + 2 + 12 mixed
Adam, 4 + 4 + 8 fp32 Adam).
"""
from __future__ import annotations

import math


def capacity(factor: float, top_k: int, tokens: int, experts: int) -> int:
    if not factor > 0:
        raise ValueError(f"capacity factor must be > 0, got {factor!r}")
    return math.ceil(factor * top_k * tokens / experts)


def kept(routed: list, cap: int | None) -> list:
    """Per-expert kept assignments (``cap`` None: dropless)."""
    return list(routed) if cap is None else [min(n, cap) for n in routed]


def dropped(routed: list, cap: int | None) -> int:
    """Assignments dropped: ``sum_e max(0, n_e - C)``."""
    return 0 if cap is None else sum(max(0, n - cap) for n in routed)


def owner(expert: int, experts: int, ep: int) -> int:
    """The EP rank that holds ``expert`` (contiguous blocks)."""
    return expert // (experts // ep)


def split_sizes(kept_by_rank: list, rank: int, ep: int) -> tuple:
    """``(send, recv)`` rows of ``rank`` to / from each EP peer, from the
    kept per-expert counts of every EP rank (``kept_by_rank[r][e]``)."""
    experts = len(kept_by_rank[rank])
    per = experts // ep
    send = [sum(kept_by_rank[rank][d * per:(d + 1) * per])
            for d in range(ep)]
    recv = [sum(kept_by_rank[s][rank * per:(rank + 1) * per])
            for s in range(ep)]
    return send, recv


def all_to_all_bytes(kept_by_rank: list, rank: int, ep: int, hidden: int,
                     elt: int = 4) -> dict:
    """Bytes into each all-to-all of one layer on ``rank`` (the table)."""
    send, recv = split_sizes(kept_by_rank, rank, ep)
    s, r, row = sum(send), sum(recv), hidden * elt
    return {"counts": 8 * len(kept_by_rank[rank]),
            "dispatch_forward": s * row, "combine_forward": r * row,
            "combine_backward": s * row, "dispatch_backward": r * row,
            "dispatch_off_rank": (s - send[rank]) * row}


def uniform_bytes(top_k: int, tokens: int, hidden: int, ep: int,
                  elt: int = 4) -> float:
    """``k T h elt (ep - 1) / ep``: what leaves a rank per all-to-all when
    the router spreads tokens evenly and nothing is dropped."""
    return top_k * tokens * hidden * elt * (ep - 1) / ep


def states_per_rank(total: int, routed: int, ep: int, world: int,
                    per_param=(4, 4, 8), dense_sharded: bool = False
                    ) -> dict:
    """Model-state bytes one rank holds: ``total`` parameters of which
    ``routed`` are routed experts (all MoE layers), experts over ``ep``,
    the dense rest whole or (``dense_sharded``, FSDP) over ``world``;
    ``per_param`` = (weight, gradient, optimizer) bytes per parameter."""
    dense = total - routed
    n = routed / ep + (dense / world if dense_sharded else dense)
    w, g, o = per_param
    return {"parameters": n, "dense": dense, "experts": routed / ep,
            "params": n * w, "grads": n * g, "optimizer": n * o,
            "total": n * (w + g + o)}


def check(experts: int, top_k: int, ep: int, world: int,
          capacity_factors=()) -> None:
    """The bad inputs of an expert-parallel run, one line each."""
    if ep < 1 or world % ep:
        raise ValueError(f"ep={ep} does not divide the world of {world} "
                         "ranks")
    if experts % ep:
        raise ValueError(f"experts={experts} do not divide over ep={ep} "
                         "ranks")
    if not 1 <= top_k <= experts:
        raise ValueError(f"top_k={top_k} must be between 1 and "
                         f"experts={experts}")
    for c in capacity_factors:
        if c is not None and not c > 0:
            raise ValueError(f"capacity factor must be > 0, got {c!r}")
