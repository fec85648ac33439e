"""A pipeline schedule laid out in time, from its order and dependencies.

    from labkit.predict.pipeline_parallel.simulator import simulate
    tl = simulate("1f1b", 4, 8)       # tl.bubble == 3 / 8, tl.ops, ...

Each rank runs its operations in the order of
:func:`labkit.predict.pipeline_parallel.schedules.rank_order`; an operation starts
when its rank is free and its input has arrived. Nothing else is assumed,
so the bubble, step time and peak activations come out of the schedule
itself; the tests hold them to the closed forms of Narayanan et al. 2021
(Sec. 2.2: bubble ``(p - 1) / m``, ``(p - 1) / (v m)`` interleaved) in
:mod:`labkit.predict.pipeline_parallel.costs`. Pure Python: no torch.

With the backward split (chapter 18: ``zb-h1``, ``zbv``, ``dualpipev``)
``I`` takes ``(1 - weight)`` of the backward time and ``W`` the rest; an
``I`` waits for the gradient from the next stage like a ``B``, a ``W``
only for its own ``I`` (Qi et al. 2024, Sec. 2). A micro-batch's
activations are kept from its ``F`` to its ``B``, or, split, to its
``W``: the weight gradient ``X^T dY`` still needs the layer inputs.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from labkit.predict.pipeline_parallel.schedules import (
    _check, rank_order, stage_index, stage_rank)


@dataclass(frozen=True)
class Op:
    """One forward or backward of one micro-batch through one stage."""
    rank: int
    stage: int        # global stage index, 0 .. p*v - 1
    chunk: int        # model chunk on this rank
    kind: str         # "F", "B"; split: "I" (input grad), "W" (weight)
    microbatch: int
    start: float
    end: float


@dataclass
class Timeline:
    schedule: str
    stages: int
    microbatches: int
    chunks: int
    ops: list[Op]
    makespan: float
    busy: list[float]                 # per rank
    peak_activations: list[float]     # per rank, in whole-stage micro-batches
    extra: dict = field(default_factory=dict)

    @property
    def bubble(self) -> float:
        """Measured like the papers: (time - busy) / busy, over all ranks."""
        busy = sum(self.busy)
        return (self.stages * self.makespan - busy) / busy

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("ops")
        d["bubble"] = self.bubble
        return d


def simulate(schedule: str, stages: int, microbatches: int, chunks: int = 1,
             forward: float = 1.0, backward: float = 2.0,
             comm: float = 0.0, weight: float = 0.5,
             order: dict | None = None) -> Timeline:
    """Lay a schedule out in time.

    ``forward`` and ``backward`` are the times of one micro-batch through a
    whole stage (``L/p`` layers); a chunk of the interleaved schedule takes
    ``1/v`` of them. ``comm`` is the delay of one point-to-point transfer
    between ranks. Each rank runs its operations in :func:`rank_order`; an
    operation starts when the rank is free and its input has arrived
    (forward from the previous stage, backward from the next one).
    ``weight`` is the share of the backward that is ``W`` (1/2 for a
    linear layer: ``dX`` and ``dW`` are one matrix product each).
    ``order`` replaces :func:`rank_order`'s (e.g. the order a rank
    really ran, read back from a run), in the same form.
    """
    _check(schedule, stages, microbatches, chunks)
    if forward <= 0 or backward <= 0 or comm < 0:
        raise ValueError("forward and backward must be > 0, comm >= 0")
    if not 0 < weight < 1:
        raise ValueError(f"weight must be a share in (0, 1), got {weight}")
    p, v = stages, chunks
    n_stages = p * v
    order = order or rank_order(schedule, p, microbatches, v)
    cost = {"F": forward / v, "B": backward / v,
            "I": backward * (1 - weight) / v, "W": backward * weight / v}
    # (kind, stage, mb); "G": the input gradient, by a B or an I
    end: dict[tuple[str, int, int], float] = {}
    pos = {r: 0 for r in range(p)}
    free = {r: 0.0 for r in range(p)}
    ops: list[Op] = []

    def ready(kind: str, stage: int, mb: int) -> float | None:
        """When the input of this operation is there (None: not yet)."""
        if kind == "W":                   # its own I, on this rank
            return end.get(("G", stage, mb))
        if kind == "F":
            if stage == 0:
                return 0.0
            dep = ("F", stage - 1, mb)
        elif stage == n_stages - 1:
            dep = ("F", stage, mb)        # the loss, on the same rank
            return end.get(dep)
        else:
            dep = ("G", stage + 1, mb)
        t = end.get(dep)
        near = (stage_rank(schedule, p, dep[1])
                == stage_rank(schedule, p, stage))
        return None if t is None else t + (0.0 if near else comm)

    remaining = sum(len(o) for o in order.values())
    while remaining:
        progressed = False
        for r in range(p):
            while pos[r] < len(order[r]):
                kind, mb, chunk = order[r][pos[r]]
                stage = stage_index(schedule, p, r, chunk)
                t_in = ready(kind, stage, mb)
                if t_in is None:
                    break
                start = max(free[r], t_in)
                stop = start + cost[kind]
                end[("G" if kind in "BI" else kind, stage, mb)] = stop
                free[r] = stop
                ops.append(Op(r, stage, chunk, kind, mb, start, stop))
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # a wrong order would wait forever
            raise RuntimeError(f"{schedule}: the schedule deadlocks")
    makespan = max(o.end for o in ops)
    busy = [sum(o.end - o.start for o in ops if o.rank == r)
            for r in range(p)]
    peak = []
    for r in range(p):
        held = top = 0.0
        for kind, _, _ in order[r]:
            held += {"F": 1, "B": -1, "I": 0, "W": -1}[kind] / v
            top = max(top, held)
        peak.append(top)
    ops.sort(key=lambda o: (o.rank, o.start))
    return Timeline(schedule, p, microbatches, v, ops, makespan, busy, peak,
                    {"forward": forward, "backward": backward, "comm": comm,
                     "weight": weight})
