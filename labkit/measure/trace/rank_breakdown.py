"""One rank's trace split into compute, communication, data, other, idle.

    from labkit.measure.trace.kineto import read
    from labkit.measure.trace.rank_breakdown import breakdown
    b = breakdown(read("traces/slow/rank-0.json.gz"))   # b["steps"], ...

Each kind of time is a *union of intervals* (:mod:`labkit.measure.trace.intervals`):
two kernels running at once on two streams count once.
:mod:`labkit.measure.profiling` runs this on every rank of a run folder.

**GPU traces, the launch view (default): HTA's breakdown.** Every kernel
belongs to the step whose ``ProfilerStep#N`` launched it (its correlation
leads to its CPU launch); a step is measured on the GPU timeline, from the
first start to the last end of *its* kernels; the profiler's last step is
left out and the total runs from the first to the last kept kernel (gaps
between steps included), all by the rules of HolisticTraceAnalysis 0.5.0's
``get_temporal_breakdown`` and ``get_comm_comp_overlap``
(:mod:`labkit.measure.trace.hta_breakdown`, each rule named there). HTA's three
shares are kept exactly: compute; non-compute = exposed communication +
"other" (memory and sync kernels not under compute); idle = data (the CPU
was in the DataLoader's ``__next__`` while the GPU had nothing) + idle.
The total's ``hta`` entry holds HTA's four percentages, rounded as HTA
rounds them.

**The CPU-window view** (``view="cpu-window"``; the only view of a CPU
trace, :mod:`labkit.measure.trace.cpu_window`) splits whatever ran in the CPU's
``ProfilerStep#N`` range, each instant to the first busy kind of a fixed
order, so "communication" is *exposed* communication. On a GPU that lags
its CPU, that window holds the kernels of the step before, so the two
views differ (chapter 7, "When the GPU lags the CPU"). On a CPU (gloo) trace a
``c10d::`` op on the main thread only enqueues; the transfer runs on
gloo's own threads (``gloo:all_reduce`` ...): both are communication; the
DataLoader's ``__next__`` is data, every other ``cpu_op`` compute. Beside
the split, ``overlap_pct = |comm & compute| / |comm|``. What the doctor
reads besides the split is :mod:`labkit.measure.trace.step_facts`.
"""
from __future__ import annotations

from labkit.measure.trace import hta_breakdown as H
from labkit.measure.trace.cpu_window import idle_gaps, split
from labkit.measure.trace.intervals import (clip, intersect, subtract, total,
                                            union)
from labkit.measure.trace.kineto import KIND_OF_TYPE, Trace
from labkit.measure.trace.step_facts import step_facts

KINDS = ("compute", "communication", "data", "other", "idle")
VIEWS = ("launch", "cpu-window")


# -- the launch view: HTA's breakdown --------------------------------------

def hta_split(t: Trace, kernels) -> dict:
    """Microseconds of each kind over the span of ``kernels``, HTA's way.

    Compute, non-compute (= communication + other) and idle (= data + idle)
    are HTA's numbers; within them, exposed communication is the
    communication not under compute and data the DataLoader's time inside
    the idle gaps (interval sets of HTA's groups of positive length).
    ``busy`` (the sets per kind) and ``gaps`` come back for the doctor.
    """
    h = H.temporal([(s, e, typ) for s, e, typ, _ in kernels])
    lo, hi = h["start"], h["start"] + h["span"]
    g = h["groups"]
    busy = {k: [(s, e) for s, e in g[k] if e > s]
            for k in ("compute", "communication")}
    busy["other"] = union((s, e) for s, e, typ, _ in kernels
                          if typ not in KIND_OF_TYPE)
    comm = total(subtract(busy["communication"], busy["compute"]))
    comm = min(max(comm, 0.0), max(h["non_compute"], 0.0))
    gaps = subtract([(lo, hi)], [(s, e) for s, e in g["all"] if e > s])
    data = total(intersect(gaps, clip(t.busy["data"], lo, hi)))
    data = min(data, max(h["idle"], 0.0))
    return {"start": lo, "step": h["span"], "compute": h["compute"],
            "communication": comm, "other": h["non_compute"] - comm,
            "data": data, "idle": h["idle"] - data,
            "comm_total": h["comm"], "overlap": h["overlap"],
            "busy": busy, "gaps": gaps}


def _row(n, d: dict) -> dict:
    row = {"step": n, "start_us": d["start"], "step_us": d["step"],
           **{f"{k}_us": d[k] for k in (*KINDS, "comm_total", "overlap")}}
    row["overlap_pct"] = (100 * row["overlap_us"] / row["comm_total_us"]
                          if row["comm_total_us"] else None)
    return row


def _launch_view(t: Trace) -> tuple[list[dict], dict]:
    by_step: dict[int, list] = {}
    for k in t.kernels:
        by_step.setdefault(k[3], []).append(k)
    steps = []
    for n, lo, hi in t.steps:
        d = hta_split(t, by_step[n])
        row = _row(n, d)
        row.update(step_facts(t, n, lo, hi, d["busy"], d["gaps"]))
        steps.append(row)
    d = hta_split(t, t.kernels)
    tot = _row(None, d)
    del tot["step"], tot["start_us"]
    tot["steps"] = len(steps)
    for k in KINDS:
        tot[f"{k}_pct"] = 100 * tot[f"{k}_us"] / d["step"] if d["step"] else 0
    tot["hta"] = {   # HTA's columns, rounded as HTA rounds them
        "idle_time_pctg": H.pctg(d["data"] + d["idle"], d["step"]),
        "compute_time_pctg": H.pctg(d["compute"], d["step"]),
        "non_compute_time_pctg": H.pctg(d["communication"] + d["other"],
                                        d["step"]),
        "comp_comm_overlap_pctg": H.pctg(d["overlap"], d["comm_total"])}
    return steps, tot


# -- the CPU-window view (labkit.measure.trace.cpu_window) -----------------------

def _window_view(t: Trace) -> tuple[list[dict], dict]:
    steps = []
    for n, (lo, hi) in sorted(t.cpu_steps.items(), key=lambda x: x[1]):
        row = _row(n, {"start": lo, "step": hi - lo, **split(t, lo, hi)})
        gaps = idle_gaps(t, lo, hi)
        row.update(step_facts(t, n, lo, hi, t.busy, gaps))
        steps.append(row)
    return steps, combine(steps)


# -- the breakdown -----------------------------------------------------------

def breakdown(t: Trace, view: str = "launch") -> dict:
    """Per-step split of one rank, and its total (see the module doc).

    ``view``: "launch" (GPU traces: HTA's breakdown, the default) or
    "cpu-window" (the CPU's ``ProfilerStep`` ranges; CPU traces have only
    this one). The launch view's total spans all kept kernels, gaps
    between steps included, so it is not the sum of the steps.
    """
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r} (choose from "
                         f"{', '.join(VIEWS)})")
    gpu_launch = t.device == "gpu" and view == "launch"
    steps, tot = _launch_view(t) if gpu_launch else _window_view(t)
    return {"rank": t.rank, "file": t.path, "device": t.device,
            "view": view if t.device == "gpu" else "cpu-window",
            "loader": t.loader, "steps": steps, "total": tot,
            "steps_without_kernels": t.empty_steps if gpu_launch else [],
            "top": top_ops(t)}


def combine(steps: list[dict]) -> dict:
    """Sum of the time columns over steps; shares in percent of the sum."""
    keys = ["step_us", *(f"{k}_us" for k in KINDS), "comm_total_us",
            "overlap_us"]
    out = {k: sum(s[k] for s in steps) for k in keys}
    out["steps"] = len(steps)
    for k in KINDS:
        out[f"{k}_pct"] = (100 * out[f"{k}_us"] / out["step_us"]
                           if out["step_us"] else 0.0)
    out["overlap_pct"] = (100 * out["overlap_us"] / out["comm_total_us"]
                          if out["comm_total_us"] else None)
    return out


def top_ops(t: Trace, n: int = 5) -> list[dict]:
    """The kernels (GPU) or top-level ops (CPU) that take the most time.

    On the CPU, nested ops are charged to the outermost one, so a row is
    "time spent under this op" without double counting.
    """
    if not t.steps:
        return []
    lo, hi = t.steps[0][1], t.steps[-1][2]
    agg: dict[tuple, list] = {}
    end = -1.0
    for s, e, kind, name in t.ops:
        if s < lo or s >= hi:
            continue
        if t.device == "cpu" and not name.startswith("gloo:"):
            if s < end:
                continue        # nested inside an op already counted
            end = e
        a = agg.setdefault((kind, name), [0, 0.0])
        a[0] += 1
        a[1] += e - s
    rows = [{"kind": k, "name": nm, "count": c, "total_us": d}
            for (k, nm), (c, d) in agg.items()]
    rows.sort(key=lambda r: -r["total_us"])
    comp = [r for r in rows if r["kind"] == "compute"][:n]
    comm = [r for r in rows if r["kind"] == "communication"][:n]
    return comp + comm


def mean_step(report: dict, rank: int | None = None) -> dict[str, float]:
    """Milliseconds per step of each kind, averaged over steps (and ranks)."""
    rows = [s for r in report["ranks"] if rank in (None, r["rank"])
            for s in r["steps"]]
    if not rows:
        raise ValueError(f"no steps for rank {rank}")
    out = {k: sum(s[f"{k}_us"] for s in rows) / len(rows) / 1e3
           for k in ("step", *KINDS, "comm_total", "overlap")}
    out["overlap_pct"] = (100 * out["overlap"] / out["comm_total"]
                          if out["comm_total"] else None)
    return out
