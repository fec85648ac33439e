"""The CPU-window split: what ran while the CPU was inside a step.

    from labkit.measure.trace import cpu_window
    cpu_window.split(trace, lo, hi)     # microseconds of each kind

The window is the CPU's ``ProfilerStep#N`` range ``[lo, hi)``. Each instant
of it goes to the first kind, in this order, that is busy then (``ORDER``);
what is left is idle::

    GPU: compute > communication > other > data > idle
    CPU: compute > data > communication > other > idle

so "communication" is *exposed* communication. It is the only view of a
CPU (gloo) trace, where the device is the CPU; on a GPU that lags its CPU
it holds the kernels of the step before (:mod:`labkit.measure.profiling`
explains the two views).
"""
from __future__ import annotations

from labkit.measure.trace.intervals import (clip, intersect, subtract, total,
                                            union)
from labkit.measure.trace.kineto import Trace

ORDER = {"gpu": ("compute", "communication", "other", "data"),
         "cpu": ("compute", "data", "communication", "other")}


def idle_gaps(t: Trace, lo: float, hi: float, busy=None) -> list[tuple]:
    """The idle stretches of [lo, hi): what no kind covers."""
    busy = t.busy if busy is None else busy
    on = union(p for k in ORDER[t.device] for p in clip(busy.get(k, []), lo, hi))
    return subtract([(lo, hi)], on)


def split(t: Trace, lo: float, hi: float) -> dict[str, float]:
    """Microseconds of each kind in [lo, hi), exclusive in ``ORDER``."""
    out, covered = {}, []
    for kind in ORDER[t.device]:
        part = subtract(clip(t.busy.get(kind, []), lo, hi), covered)
        out[kind] = total(part)
        covered = union(covered + part)
    out["idle"] = (hi - lo) - total(covered)
    comm = clip(t.busy.get("communication", []), lo, hi)
    out["comm_total"] = total(comm)
    out["overlap"] = total(intersect(comm, clip(t.busy["compute"], lo, hi)))
    return out
