"""Interval sets: the arithmetic of "counted once".

A *set* is a sorted list of disjoint ``(start, end)`` tuples (microseconds).
Two kernels running at once on two streams are one interval of the union,
so a kind of time is ``total(union(...))``, never a sum of durations.
Used by :mod:`labkit.measure.profiling` and :mod:`labkit.measure.trace.hta_breakdown`.
"""
from __future__ import annotations

import bisect


def union(intervals) -> list[tuple[float, float]]:
    """Merge intervals into a sorted disjoint set (touching ones join)."""
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def total(a) -> float:
    return sum(e - s for s, e in a)


def intersect(a, b) -> list[tuple[float, float]]:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a, b) -> list[tuple[float, float]]:
    """The parts of set ``a`` not covered by set ``b``."""
    out, j = [], 0
    for s, e in a:
        while j < len(b) and b[j][1] <= s:
            j += 1
        k, cur = j, s
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            out.append((cur, e))
    return out


def clip(a, lo: float, hi: float) -> list[tuple[float, float]]:
    """The part of set ``a`` inside [lo, hi) (bisect: sets can be long)."""
    i = max(bisect.bisect_right(a, (lo,)) - 1, 0)
    out = []
    for s, e in a[i:]:
        if s >= hi:
            break
        s, e = max(s, lo), min(e, hi)
        if s < e:
            out.append((s, e))
    return out
