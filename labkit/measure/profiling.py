"""Where a training step's time goes: compute, communication, data, idle.

    python -m labkit profile RUN_DIR            # a table, one row per step
    python -m labkit profile RUN_DIR --json     # the same as JSON
    python -m labkit profile RUN_DIR --doctor   # + triage and advice

``RUN_DIR`` holds one Chrome trace per rank (``*.json`` or ``*.json.gz``,
as written by :mod:`labkit.measure.capture` or any ``torch.profiler`` run);
a single trace file works too. For each rank and each profiled step
(``ProfilerStep#N``) the step is split into kinds of time, each counted as a
*union of intervals*: two kernels running at once on two streams count once.

What runs where depends on the trace:

* **GPU trace** (Kineto CUDA activities). The device is the GPU. Kernels,
  ``Memcpy``/``Memset`` on any stream are its activity; NCCL kernels
  (``nccl...Kernel``) are communication, copies and sync kernels are
  "other", every other kernel is compute -- the classes of
  HolisticTraceAnalysis (HTA), ``hta/utils/utils.py``. Data loading is the
  CPU-side DataLoader ``__next__`` while the GPU has nothing to run.
* **CPU trace** (gloo). The device is the CPU process. A ``c10d::`` op on
  the main thread only enqueues; the transfer runs on gloo's own threads
  (events named ``gloo:all_reduce`` ...): both are communication. The
  DataLoader's ``__next__`` events are data loading, every other ``cpu_op``
  is compute.

Each instant of a step goes to the first kind, in this order, that is busy
at that instant (``ORDER``); what is left is idle::

    GPU: compute > communication > other > data > idle
    CPU: compute > data > communication > other > idle

so "communication" in the split is *exposed* communication. Its overlap
with compute is reported beside it: ``overlap_pct = |comm & compute| /
|comm|``, the definition of HTA's ``get_comm_comp_overlap()``.

Step windows. CPU: the ``ProfilerStep#N`` event itself. GPU: a kernel
belongs to the step in which the CPU launched it (its ``correlation`` id
leads to the ``cudaLaunchKernel`` event); step N's window runs from its
first kernel to the first kernel of step N+1, the last step's to its last
kernel end. The windows tile the GPU timeline, so the sum over steps is the
whole profiled span, as in HTA's ``get_temporal_breakdown()``.
"""
from __future__ import annotations

import bisect
import contextlib
import gc
import gzip
import json
import os
import re
import statistics
import zlib
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("compute", "communication", "data", "other", "idle")
ORDER = {"gpu": ("compute", "communication", "other", "data"),
         "cpu": ("compute", "data", "communication", "other")}
PHASES = ("data", "forward", "backward", "optimizer")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize",
              "cudaEventSynchronize", "cudaMemcpy")
# HTA's kernel classes (hta/utils/utils.py, v0.5.0), kept identical so the
# two breakdowns can be compared line by line.
NCCL_KERNEL = re.compile(r"^nccl.*Kernel")
MEMORY_KERNEL = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
STEP = re.compile(r"^ProfilerStep#(\d+)$")
RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)")


# -- intervals ---------------------------------------------------------------
# A "set" is a sorted list of disjoint (start, end) tuples, in microseconds.

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


# -- reading ------------------------------------------------------------------

@contextlib.contextmanager
def _gc_paused():
    """Pause the cyclic garbage collector while a trace is parsed.

    A 34 MB trace is 109k small dicts; building them sets off the collector
    again and again, each pass walking everything alive, and that took two
    thirds of the reading time (0.9 s -> 0.34 s of CPU time here). JSON
    holds no reference cycles, so nothing is left for it to collect.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def load(path: str | Path) -> dict:
    """Read a Chrome trace (``.json`` or ``.json.gz``) with one-line errors."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"{p}: no such file")
    raw = p.read_bytes()
    if not raw:
        raise ValueError(f"{p}: the file is empty")
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as e:
            raise ValueError(f"{p}: truncated or damaged gzip file "
                             f"({e})") from None
    try:
        with _gc_paused():
            data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{p}: not valid JSON, truncated? ({e})") from None
    if isinstance(data, list):  # the bare-array form of the format
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(
            data.get("traceEvents"), list):
        raise ValueError(f"{p}: not a Chrome trace (no 'traceEvents' list)")
    return data


@dataclass
class Trace:
    """The parts of one rank's trace the breakdown needs, in microseconds."""
    path: str
    rank: int | None
    device: str                                   # "gpu" or "cpu"
    steps: list[tuple[int, float, float]]         # (N, start, end) windows
    busy: dict[str, list] = field(default_factory=dict)  # kind -> set
    phases: dict[str, list] = field(default_factory=dict)  # name -> set
    ops: list[tuple] = field(default_factory=list)  # (start, end, kind, name)
    items: list[float] = field(default_factory=list)  # ts of aten::item
    syncs: list[tuple[float, float]] = field(default_factory=list)
    loader: str | None = None                     # DataLoader iterator
    cpu_steps: dict[int, tuple[float, float]] = field(default_factory=dict)
    launches: list[tuple[float, float]] = field(default_factory=list)


_KIND_CACHE: dict[str, str] = {}


def _kernel_kind(name: str) -> str:
    kind = _KIND_CACHE.get(name)
    if kind is None:
        if NCCL_KERNEL.match(name):
            kind = "communication"
        elif MEMORY_KERNEL.match(name) or NOT_COMPUTE.match(name):
            kind = "other"
        else:
            kind = "compute"
        _KIND_CACHE[name] = kind
    return kind


COMM_PREFIXES = ("c10d::", "gloo:", "nccl:", "record_param_comms")


def read(path: str | Path, data: dict | None = None) -> Trace:
    """Parse one rank's trace into interval sets (see the module doc).

    One pass over the events, touching only the fields it needs: a 34 MB
    trace spends most of its time in ``json.loads``, not here.
    """
    data = load(path) if data is None else data
    with _gc_paused():
        return _read(path, data)


def _read(path, data: dict) -> Trace:
    steps, phase_iv, data_iv, items, syncs = [], {}, [], [], []
    cpu_ops, devs, launch = [], [], {}
    loader = None
    for e in data["traceEvents"]:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = e.get("cat")
        try:
            s = float(e["ts"])
            end = s + float(e["dur"])
            name = e["name"]
        except (KeyError, TypeError, ValueError):
            continue
        if cat == "cpu_op":
            if name == "aten::item":
                items.append(s)
            cpu_ops.append((s, end, name, e.get("pid")))
        elif cat in GPU_CATS:
            devs.append((s, end, name,
                         (e.get("args") or {}).get("correlation")))
        elif cat in LAUNCH_CATS:
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                launch[c] = s
            if name in SYNC_CALLS:
                syncs.append((s, end))
        elif cat == "user_annotation":
            m = STEP.match(name)
            if m:
                steps.append((int(m.group(1)), s, end, e.get("pid")))
            elif name in PHASES:
                phase_iv.setdefault(name, []).append((s, end))
            elif "DataLoader" in name and name.endswith("__next__"):
                data_iv.append((s, end))
                loader = ("multi-process" if "MultiProcessing" in name
                          else "single-process")
            elif name.startswith("gloo:"):    # gloo's own threads
                cpu_ops.append((s, end, name, e.get("pid")))
    if not steps:
        raise ValueError(
            f"{path}: no ProfilerStep#N events; profile with a schedule and "
            "call prof.step() once per iteration (labkit.measure.capture)")
    steps.sort()
    info = data.get("distributedInfo") or {}
    rank = info.get("rank")
    if rank is None:
        m = RANK_IN_NAME.search(Path(path).name)
        rank = int(m.group(1)) if m else None
    t = Trace(str(path), rank, "gpu" if devs else "cpu",
              [(n, s, e) for n, s, e, _ in steps], loader=loader,
              cpu_steps={n: (s, e) for n, s, e, _ in steps})
    t.phases = {k: union(v) for k, v in phase_iv.items()}
    t.items, t.syncs = sorted(items), sorted(syncs)
    busy = {k: [] for k in ("compute", "communication", "other")}
    if devs:
        _read_gpu(t, devs, launch, busy, path)
    else:
        pid = steps[0][3]
        for s, end, name, p in cpu_ops:
            if p != pid:
                continue
            kind = ("communication" if name.startswith(COMM_PREFIXES)
                    else "compute")
            busy[kind].append((s, end))
            t.ops.append((s, end, kind, name))
    t.busy = {k: union(v) for k, v in busy.items()}
    t.busy["data"] = union(data_iv)
    if not devs:
        # An op that encloses a c10d call or the DataLoader's work (the
        # autograd hook that launches a bucket, a collate) is not compute
        # for that stretch: cut those out of the compute set.
        calls = [(s, e) for s, e, kind, name in t.ops
                 if kind == "communication" and not name.startswith("gloo:")]
        t.busy["compute"] = subtract(t.busy["compute"],
                                     union(calls + t.busy["data"]))
    t.ops.sort()
    t.launches.sort()
    return t


def _read_gpu(t: Trace, devs, launch, busy, path) -> None:
    starts = [s for _, s, _ in t.steps]
    first: dict[int, float] = {}   # step index -> first kernel start
    last_end: dict[int, float] = {}
    for s, end, name, corr in devs:
        kind = _kernel_kind(name)
        busy[kind].append((s, end))
        t.ops.append((s, end, kind, name))
        when = launch.get(corr)
        if when is None:
            continue
        t.launches.append((s, when))
        i = bisect.bisect_right(starts, when) - 1
        if i >= 0 and when < t.steps[i][2]:
            if i not in first or s < first[i]:
                first[i] = s
            if i not in last_end or end > last_end[i]:
                last_end[i] = end
    if not first:
        raise ValueError(f"{path}: a GPU trace, but no kernel was launched "
                         "inside a ProfilerStep")
    idx = sorted(first)
    windows = []
    for k, i in enumerate(idx):
        end = first[idx[k + 1]] if k + 1 < len(idx) else last_end[i]
        windows.append((t.steps[i][0], first[i], max(end, first[i])))
    t.steps = windows


# -- the breakdown -----------------------------------------------------------

def idle_gaps(t: Trace, lo: float, hi: float) -> list[tuple]:
    """The idle stretches of [lo, hi): what no kind covers."""
    busy = union(p for k in ORDER[t.device]
                 for p in clip(t.busy.get(k, []), lo, hi))
    return subtract([(lo, hi)], busy)


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


def host_bound_idle(t: Trace, lo: float, hi: float,
                    slack_us: float = 10.0) -> tuple[float, float]:
    """GPU idle in [lo, hi) the host caused: (after a sync, other).

    A gap is host-bound when the kernel that ends it was launched after
    the gap began: the GPU had nothing queued (HTA calls this "host
    wait"). It is a sync gap when a synchronize call (or ``.item()``)
    returned just before or during it: the host drained the queue, then
    had to launch everything anew. The other host-bound gaps are launch
    overhead: the CPU cannot issue kernels as fast as the GPU runs them.
    """
    starts = [s for s, _ in t.launches]
    sync_ends = sorted(e for _, e in t.syncs)
    after_sync = other = 0.0
    for g0, g1 in idle_gaps(t, lo, hi):
        i = bisect.bisect_left(starts, g1)
        if i == len(starts) or t.launches[i][1] <= g0:
            continue                      # work was queued: not the host
        when = t.launches[i][1]
        j = bisect.bisect_left(sync_ends, g0 - slack_us)
        if j < len(sync_ends) and sync_ends[j] <= when:
            after_sync += g1 - g0
        else:
            other += g1 - g0
    return after_sync, other


def _outside(points: list[float], lo: float, hi: float, skip) -> int:
    """How many of the sorted ``points`` in [lo, hi) lie outside ``skip``."""
    inside = points[bisect.bisect_left(points, lo):
                    bisect.bisect_left(points, hi)]
    return sum(1 for x in inside if not clip(skip, x, x + 1e-3))


def _step_extras(t: Trace, n: int, lo: float, hi: float) -> dict:
    """What the doctor reads besides the split: counts, phases, syncs.

    Host-side facts (phases, ``.item()`` calls, synchronize calls) are
    read in the CPU's ``ProfilerStep`` window, device facts in ``[lo, hi)``.
    """
    ops = t.ops[bisect.bisect_left(t.ops, (lo,)):
                bisect.bisect_left(t.ops, (hi,))]
    comm = [o[1] - o[0] for o in ops if o[2] == "communication"
            and (t.device == "gpu" or o[3].startswith("gloo:"))]
    if t.device == "gpu":
        comp = [o[1] - o[0] for o in ops if o[2] == "compute"]
    else:   # top-level ops only: nested ones are not extra work
        comp, end = [], -1.0
        for s, e, kind, _ in ops:
            if kind == "compute" and s >= end:
                comp.append(e - s)
                end = e
    exposed = subtract(clip(t.busy["communication"], lo, hi),
                       union(clip(t.busy["compute"], lo, hi)
                             + clip(t.busy["data"], lo, hi)))
    c_lo, c_hi = t.cpu_steps.get(n, (lo, hi))
    backward = clip(t.phases.get("backward", []), lo, hi)
    return {
        "phases_us": {k: total(clip(v, c_lo, c_hi))
                      for k, v in t.phases.items()},
        "collectives": len(comm),
        "collective_median_us": statistics.median(comm) if comm else 0.0,
        "kernels": len(comp),
        "kernel_median_us": statistics.median(comp) if comp else 0.0,
        # Adam reads its CPU step counters with .item(): not a sync point
        "items": _outside(t.items, c_lo, c_hi,
                          t.phases.get("optimizer", [])),
        "sync_us": total(clip(union(t.syncs), c_lo, c_hi)),
        "exposed_comm_outside_backward_us": total(subtract(exposed,
                                                           backward)),
        **dict(zip(("idle_after_sync_us", "idle_launch_us"),
                   host_bound_idle(t, lo, hi) if t.device == "gpu"
                   else (0.0, 0.0))),
    }


def breakdown(t: Trace) -> dict:
    """Per-step split of one rank, plus the sum over its steps."""
    steps = []
    for n, lo, hi in t.steps:
        row = {"step": n, "start_us": lo, "step_us": hi - lo,
               **{f"{k}_us": v for k, v in split(t, lo, hi).items()}}
        row["overlap_pct"] = (100 * row["overlap_us"] / row["comm_total_us"]
                              if row["comm_total_us"] else None)
        row.update(_step_extras(t, n, lo, hi))
        steps.append(row)
    return {"rank": t.rank, "file": t.path, "device": t.device,
            "loader": t.loader, "steps": steps, "total": combine(steps),
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


def trace_files(run_dir: str | Path) -> list[Path]:
    p = Path(run_dir)
    if not p.exists():
        raise ValueError(f"{p}: no such file or folder")
    if p.is_file():
        return [p]
    files = sorted(f for f in p.iterdir() if f.is_file()
                   and f.name.endswith((".json", ".json.gz")))
    if not files:
        raise ValueError(f"{p}: no trace files (*.json, *.json.gz) in it")
    return files


def _one(f: Path) -> dict:
    return breakdown(read(f))


def analyze(run_dir: str | Path, jobs: int | None = None) -> dict:
    """Read every rank's trace in ``run_dir``; one breakdown per rank.

    ``jobs`` processes read the files in parallel (default: one per file,
    up to the cores, when the folder holds more than 20 MB of traces;
    most of the time goes to ``json.loads``, which holds the GIL).
    """
    files = trace_files(run_dir)
    if jobs is None:
        big = sum(f.stat().st_size for f in files) > 20e6
        jobs = min(len(files), os.cpu_count() or 1) if big else 1
    if jobs > 1 and len(files) > 1:
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            ranks = list(pool.map(_one, files))
    else:
        ranks = [_one(f) for f in files]
    for i, r in enumerate(ranks):
        if r["rank"] is None:
            r["rank"] = i
    seen: dict[int, str] = {}
    for r in ranks:
        if r["rank"] in seen:
            raise ValueError(f"{run_dir}: two traces for rank {r['rank']}: "
                             f"{seen[r['rank']]} and {r['file']}")
        seen[r["rank"]] = r["file"]
    ranks.sort(key=lambda r: r["rank"])
    return {"run_dir": str(run_dir), "ranks": ranks}


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


# -- output ------------------------------------------------------------------

def table(report: dict) -> str:
    """A plain-text table: one row per rank and step, then per-rank sums."""
    head = (f"{'rank':>4} {'step':>6} {'ms':>9} " + " ".join(
        f"{k[:7]:>8}" for k in KINDS) + f" {'overlap':>8}")
    lines = [f"{report['run_dir']}: % of each step (communication = "
             "exposed; overlap = comm under compute / comm)", head]

    def row(rank, label, d):
        pct = [100 * d[f"{k}_us"] / d["step_us"] if d["step_us"] else 0
               for k in KINDS]
        ov = "-" if d["overlap_pct"] is None else f"{d['overlap_pct']:.1f}%"
        return (f"{rank:>4} {label:>6} {d['step_us'] / 1e3:9.2f} "
                + " ".join(f"{p:7.1f}%" for p in pct) + f" {ov:>8}")
    for r in report["ranks"]:
        for s in r["steps"]:
            lines.append(row(r["rank"], s["step"], s))
        lines.append(row(r["rank"], "all", r["total"]))
    devices = sorted({r["device"] for r in report["ranks"]})
    lines.append(f"device: {', '.join(devices)} trace"
                 + (" (CPU time, not GPU time)" if devices == ["cpu"]
                    else ""))
    return "\n".join(lines)


COLORS = {"compute": "#4c72b0", "communication": "#dd8452",
          "data": "#55a868", "other": "#8172b3", "idle": "#c7c7c7"}


def plot_bars(reports: dict, ax=None, unit: str = "ms"):
    """Stacked bars of the mean step, one bar per (label, rank).

    ``reports`` maps a label (a configuration) to an :func:`analyze` result.
    """
    import matplotlib.pyplot as plt
    ax = ax or plt.subplots(figsize=(8, 3.5))[1]
    labels, bottoms = [], []
    for label, rep in reports.items():
        for r in rep["ranks"]:
            m = mean_step(rep, r["rank"])
            x = len(labels)
            labels.append(f"{label}\nrank {r['rank']}")
            bottom = 0.0
            for k in KINDS:
                ax.bar(x, m[k], bottom=bottom, color=COLORS[k],
                       label=k if x == 0 else None)
                bottom += m[k]
            bottoms.append(bottom)
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel(f"time per step ({unit})")
    ax.legend(fontsize=8, ncol=5, loc="upper right")
    return ax


def plot_timeline(t: Trace, step: int | None = None, ax=None):
    """One step of one rank: a lane per kind, the exclusive split on top."""
    import matplotlib.pyplot as plt
    ax = ax or plt.subplots(figsize=(9, 2.6))[1]
    n, lo, hi = next((s for s in t.steps if step in (None, s[0])), (None,) * 3)
    if n is None:
        raise ValueError(f"{t.path}: no step {step}")
    lanes = ["compute", "communication", "data", "other"]
    for y, kind in enumerate(lanes):
        bars = [((s - lo) / 1e3, (e - s) / 1e3)
                for s, e in clip(t.busy.get(kind, []), lo, hi)]
        ax.broken_barh(bars, (y - 0.35, 0.7), color=COLORS[kind])
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_xlim(0, (hi - lo) / 1e3)
    ax.set_xlabel(f"ms since the start of step {n} (rank {t.rank}, "
                  f"{t.device} trace)")
    return ax


# -- command line ------------------------------------------------------------

def add_arguments(parser) -> None:
    parser.add_argument("run_dir", help="folder of per-rank Chrome traces "
                        "(*.json, *.json.gz), or one trace file")
    parser.add_argument("--json", action="store_true",
                        help="print the breakdown as JSON")
    parser.add_argument("--doctor", action="store_true",
                        help="add the triage and the doctor's findings")


def main(args) -> int:
    report = analyze(args.run_dir)
    if args.doctor:
        from labkit.measure import doctor
        triage, findings = doctor.triage(report), doctor.diagnose(report)
    if args.json:
        if args.doctor:
            report = {**report, "triage": triage,
                      "findings": [vars(f) for f in findings]}
        print(json.dumps(report, indent=1))
        return 0
    print(table(report))
    if args.doctor:
        print("\ntriage:")
        print("\n".join(triage))
        print("\nfindings (worst first):" if findings
              else "\nno cause above 5% of the step")
        print("\n".join(str(f) for f in findings))
    return 0
