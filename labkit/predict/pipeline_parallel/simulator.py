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
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from labkit.predict.pipeline_parallel.schedules import _check, rank_order


@dataclass(frozen=True)
class Op:
    """One forward or backward of one micro-batch through one stage."""
    rank: int
    stage: int        # global stage index, 0 .. p*v - 1
    chunk: int        # model chunk on this rank
    kind: str         # "F" or "B"
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
             comm: float = 0.0) -> Timeline:
    """Lay a schedule out in time.

    ``forward`` and ``backward`` are the times of one micro-batch through a
    whole stage (``L/p`` layers); a chunk of the interleaved schedule takes
    ``1/v`` of them. ``comm`` is the delay of one point-to-point transfer
    between ranks. Each rank runs its operations in :func:`rank_order`; an
    operation starts when the rank is free and its input has arrived
    (forward from the previous stage, backward from the next one).
    """
    _check(schedule, stages, microbatches, chunks)
    if forward <= 0 or backward <= 0 or comm < 0:
        raise ValueError("forward and backward must be > 0, comm >= 0")
    p, v = stages, chunks
    n_stages = p * v
    order = rank_order(schedule, p, microbatches, v)
    cost = {"F": forward / v, "B": backward / v}
    end: dict[tuple[str, int, int], float] = {}     # (kind, stage, mb)
    pos = {r: 0 for r in range(p)}
    free = {r: 0.0 for r in range(p)}
    ops: list[Op] = []

    def ready(kind: str, stage: int, mb: int) -> float | None:
        """When the input of this operation is there (None: not yet)."""
        if kind == "F":
            if stage == 0:
                return 0.0
            dep = ("F", stage - 1, mb)
        elif stage == n_stages - 1:
            dep = ("F", stage, mb)        # the loss, on the same rank
            return end.get(dep)
        else:
            dep = ("B", stage + 1, mb)
        t = end.get(dep)
        return None if t is None else t + comm

    remaining = sum(len(o) for o in order.values())
    while remaining:
        progressed = False
        for r in range(p):
            while pos[r] < len(order[r]):
                kind, mb, chunk = order[r][pos[r]]
                stage = chunk * p + r
                t_in = ready(kind, stage, mb)
                if t_in is None:
                    break
                start = max(free[r], t_in)
                stop = start + cost[kind]
                end[(kind, stage, mb)] = stop
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
            held += (1 if kind == "F" else -1) / v
            top = max(top, held)
        peak.append(top)
    ops.sort(key=lambda o: (o.rank, o.start))
    return Timeline(schedule, p, microbatches, v, ops, makespan, busy, peak,
                    {"forward": forward, "backward": backward, "comm": comm})
