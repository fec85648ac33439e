"""What each rank of lab 18's run did: its order, bytes held and times.

    from labkit.measure import schedules as M
    recs = launch("labkit.runs.schedules", 2, {...})
    M.order(recs[0], "zbv")       # [("F", 0, 0), ("F", 1, 0), ...]
    M.peak_bytes(recs, "zbv")     # [24576, 24576]: one number per rank
    M.bubble(recs, "zbv")         # (p T - busy) / busy, from the clocks

The twin of :mod:`labkit.predict.pipeline_parallel.zero_bubble`: the
order is the one each rank really ran (its stages' ``forward_one_chunk``,
``backward_one_chunk`` and ``backward_weight_one_chunk``, in the order
they were called, :mod:`labkit.runs.schedules.stages`); the bytes held
walk that order with the bytes autograd saved in each forward (a pack
hook counted them), freed at the micro-batch's ``B`` or ``W``, as the
prediction walks its own order with the bytes it derives. The bubble
is the papers' ``(p T - sum busy) / sum busy`` (Narayanan et al. 2021,
Sec. 2.2) with ``T`` from the first start to the last end of any rank.
"""
from __future__ import annotations

import statistics

FREES = {"F": 0, "B": 1, "I": 0, "W": 1}


def _events(rec: dict, name: str) -> list[dict]:
    return rec["schedules"][name]["events"]


def order(rec: dict, name: str) -> list[tuple[str, int, int]]:
    """``(kind, micro-batch, chunk)`` in the order this rank ran them
    (the events are appended as each call ends; one rank runs one at a
    time)."""
    return [(e["kind"], e["microbatch"], e["chunk"])
            for e in _events(rec, name)]


def torch_order(rec: dict, name: str) -> list[tuple[str, int, int]] | None:
    """torch's own ``pipeline_order`` for this rank in the same form
    (None: the schedule keeps none)."""
    run = rec["schedules"][name]
    if run["torch_order"] is None:
        return None
    chunk = {s: c for c, s in enumerate(_stages(rec, name))}
    out = []
    for a in run["torch_order"]:
        i = next(k for k, ch in enumerate(a) if not ch.isdigit())
        out.append((a[i], int(a[i + 1:]), chunk[int(a[:i])]))
    return out


def _stages(rec: dict, name: str) -> list[int]:
    """This rank's stages in chunk order (chunk 0 first)."""
    ev = _events(rec, name)
    return [next(e["stage"] for e in ev if e["chunk"] == c)
            for c in range(rec["schedules"][name]["chunks"])]


def held(rec: dict, name: str) -> int:
    """The most bytes this rank held for backward at once."""
    keep: dict[tuple[int, int], int] = {}
    now = top = 0
    for e in _events(rec, name):
        key = (e["stage"], e["microbatch"])
        if e["kind"] == "F":
            keep[key] = e["saved"]
            now += e["saved"]
        elif FREES[e["kind"]]:
            now -= keep.pop(key)
        top = max(top, now)
    return top


def peak_bytes(recs: list[dict], name: str) -> list[int]:
    """:func:`held` of every rank, in rank order."""
    return [held(r, name) for r in sorted(recs, key=lambda r: r["rank"])]


def saved_per_forward(recs: list[dict], name: str) -> list[int]:
    """The distinct byte counts one forward saved, over all ranks."""
    return sorted({e["saved"] for r in recs for e in _events(r, name)
                   if e["kind"] == "F"})


def bubble(recs: list[dict], name: str) -> float:
    """``(p T - sum busy) / sum busy`` of the last timed step."""
    ev = [e for r in recs for e in _events(r, name)]
    span = max(e["end"] for e in ev) - min(e["start"] for e in ev)
    busy = sum(e["end"] - e["start"] for e in ev)
    return (len(recs) * span - busy) / busy


def op_times(recs: list[dict], name: str) -> dict[str, float]:
    """The median seconds of each kind of operation, per chunk."""
    out: dict[str, list[float]] = {}
    for r in recs:
        for e in _events(r, name):
            out.setdefault(e["kind"], []).append(e["end"] - e["start"])
    return {k: statistics.median(v) for k, v in out.items()}


def timeline(recs: list[dict], name: str) -> list[dict]:
    """Every rank's events from the first start, for ``plot_timeline``."""
    ev = [e for r in recs for e in _events(r, name)]
    t0 = min(e["start"] for e in ev)
    return [{**e, "start": e["start"] - t0, "end": e["end"] - t0}
            for e in ev]
