"""Reading Kineto (``torch.profiler``) Chrome traces into what the breakdown
needs: one :class:`Trace` per rank.

    from labkit.measure.trace import kineto
    t = kineto.read("traces/slow/rank-0.json.gz")

A trace is a GPU trace when some event runs on a CUDA stream, else a CPU
(gloo) trace. For GPU traces the kernels that the breakdown counts are
chosen by HolisticTraceAnalysis 0.5.0's reading rules (HTA, Meta, MIT),
each named beside the HTA function it mirrors; the breakdown itself is in
:mod:`labkit.measure.trace.hta_breakdown`:

* **events** (``_compress_df``): every event with a ``dur`` and a ``cat``
  except the ``Trace`` span; a "GPU kernel" is an event whose ``stream``
  and ``correlation`` args are both >= 0, or an ``Event Sync`` /
  ``Context Sync`` (``GPUKernelFilter``); the rest are CPU events
  (``CPUOperatorFilter``). A stream that is not an integer is -1
  (``normalize_gpu_stream_numbers``).
* **rounding** (``round_down_time_stamps``): when a trace has a
  fractional time stamp (or an event without one), every event becomes
  ``[ceil(ts), floor(ts + dur))`` in microseconds -- a sub-microsecond
  kernel can then end before it starts. Integer traces are read as they are.
* **the last step left out** (``_filter_irrelevant_gpu_kernels``): the
  kernels kept are those launched by a CPU event (same ``correlation``)
  that starts before the start of the last event named ``ProfilerStep``
  that is not a kernel -- the last profiled step may be cut short.
  Kernels launched before the first step are kept. A trace with one
  ``ProfilerStep`` name or none keeps all. (HTA takes the names from all
  ranks of a folder together; we read one rank at a time.)
* **what is split** (``get_temporal_breakdown``): the kept events on a
  stream (``stream != -1``).
* **collective calls** (ours, not HTA's): the CPU's ``nccl:<op>``
  annotations, one per collective the process group was asked for. With
  one rank NCCL launches no kernel for an in-place all-reduce, so kernels
  alone count 0 collectives there; :mod:`labkit.measure.trace.step_facts`
  counts the calls.
* **a kernel's step** (``add_iteration``): the ``ProfilerStep#N`` window
  ``[ts, ts + dur)`` that holds the start of the CPU event that launched it
  (the last such event in the file when several share the correlation).
"""
from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from labkit.measure.trace.hta_breakdown import (COMMUNICATION, COMPUTATION,
                                                kernel_type)
from labkit.measure.trace.intervals import subtract, union
from labkit.measure.trace.stream import (  # noqa: F401 (re-exported)
    _gc_paused, load, open_trace, trace_files)

PHASES = ("data", "forward", "backward", "optimizer")
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize",
              "cudaEventSynchronize", "cudaMemcpy")
SYNC_KERNELS = ("Event Sync", "Context Sync")   # GPUKernelFilter's extras
STEP = re.compile(r"ProfilerStep\s*#\s*(\d+)")  # add_iteration's pattern
RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)")
COMM_PREFIXES = ("c10d::", "gloo:", "nccl:", "record_param_comms")
# our kinds of device time for HTA's kernel types
KIND_OF_TYPE = {COMPUTATION: "compute", COMMUNICATION: "communication"}


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
    # GPU: the kernels HTA splits, (start, end, HTA type, step N or None)
    kernels: list[tuple] = field(default_factory=list)
    empty_steps: list[int] = field(default_factory=list)  # no kernel kept
    comm_calls: list[float] = field(default_factory=list)  # ts of nccl:<op>


def _stream(v) -> int:
    if type(v) is int:
        return v
    try:
        return int(v)
    except (TypeError, ValueError):
        return -1


def read(path: str | Path, data: dict | None = None) -> Trace:
    """Parse one rank's trace (see the module doc).

    Without ``data`` the file is streamed (:mod:`labkit.measure.
    trace_stream`): each event is decoded, cut down to the fields the
    breakdown needs and dropped, so memory holds those fields, not the
    whole JSON (a 500 MB trace: under 1 GB, against 3.3 GB for
    ``json.loads``).
    """
    if data is None:
        meta, events = open_trace(path)
    else:
        meta, events = data, data["traceEvents"]
    with _gc_paused():
        return _read(path, _compact(events), meta)


def _compact(events) -> tuple[list[tuple], bool]:
    """The fields the breakdown reads, one tuple per event that has them,
    and whether any time stamp is not an integer (round_down_time_stamps'
    test); names are interned (a trace repeats a few hundred names)."""
    kept, rnd, names = [], False, {}
    for e in events:
        if not isinstance(e, dict):
            continue
        ts = e.get("ts")
        if type(ts) is not int:
            rnd = True
        cat, dur, name = e.get("cat"), e.get("dur"), e.get("name")
        if cat is None or dur is None or ts is None or cat == "Trace" \
                or not isinstance(name, str):
            continue
        args = e.get("args")
        args = args if isinstance(args, dict) else {}
        name = names.setdefault(name, name)
        cat = names.setdefault(cat, cat) if isinstance(cat, str) else cat
        kept.append((cat, name, ts, dur, args.get("stream", -1),
                     args.get("correlation", -1), e.get("pid")))
    return kept, rnd


def _read(path, compact, data: dict) -> Trace:
    events, rnd = compact
    ceil, floor = math.ceil, math.floor
    steps, phase_iv, data_iv, items, syncs = [], {}, [], [], []
    comm_calls = []
    cpu_ops, gpu, launch, first_by_corr = [], [], {}, {}
    step_names: set[str] = set()
    last_start = -math.inf
    loader = None
    events.reverse()      # popped from the end: read in order, each
    while events:         # tuple freed as soon as it is read
        cat, name, ts, dur, stream, corr, pid = events.pop()
        try:
            if rnd:
                s, end = ceil(ts), floor(ts + dur)
            else:
                s, end = ts, ts + dur
        except TypeError:
            continue
        stream = _stream(stream)
        if "ProfilerStep" in name:
            step_names.add(name)
        if (stream >= 0 and corr >= 0) or name in SYNC_KERNELS:
            gpu.append((s, end, name, corr, stream))
            continue
        # a CPU event
        if corr != -1:
            launch[corr] = s                       # the last one wins
        if s < first_by_corr.get(corr, math.inf):
            first_by_corr[corr] = s
        if stream != -1:                           # split like a kernel
            gpu.append((s, end, name, None, stream))
        if cat == "cpu_op":
            if name == "aten::item":
                items.append(s)
            cpu_ops.append((s, end, name, pid))
        elif cat in ("cuda_runtime", "cuda_driver"):
            if name in SYNC_CALLS:
                syncs.append((s, end))
        elif cat == "user_annotation":
            if name in PHASES:
                phase_iv.setdefault(name, []).append((s, end))
            elif "DataLoader" in name and name.endswith("__next__"):
                data_iv.append((s, end))
                loader = ("multi-process" if "MultiProcessing" in name
                          else "single-process")
            elif name.startswith("gloo:"):    # gloo's own threads
                cpu_ops.append((s, end, name, pid))
            elif name.startswith("nccl:"):    # the call, kernel or not
                comm_calls.append(s)
        if "ProfilerStep" in name:
            last_start = max(last_start, s)
            m = STEP.match(name)
            if m and cat != "gpu_user_annotation":   # the CPU's range
                steps.append((int(m.group(1)), s, end, pid))
    if not steps:
        raise ValueError(
            f"{path}: no ProfilerStep#N events; profile with a schedule and "
            "call prof.step() once per iteration (labkit.measure.trace.capture)")
    steps.sort()
    info = data.get("distributedInfo") or {}
    rank = info.get("rank")
    if rank is None:
        m = RANK_IN_NAME.search(Path(path).name)
        rank = int(m.group(1)) if m else None
    t = Trace(str(path), rank, "gpu" if any(g[4] != -1 for g in gpu)
              else "cpu", [(n, s, e) for n, s, e, _ in steps],
              loader=loader, cpu_steps={n: (s, e) for n, s, e, _ in steps})
    t.phases = {k: union(v) for k, v in phase_iv.items()}
    t.items, t.syncs = sorted(items), sorted(syncs)
    t.comm_calls = sorted(comm_calls)
    t.busy = {"data": union(data_iv)}
    if t.device == "gpu":
        _read_gpu(t, gpu, launch, first_by_corr, step_names, last_start,
                  path)
    else:
        _read_cpu(t, cpu_ops, steps[0][3])
    t.ops.sort()
    t.launches.sort()
    return t


def _read_cpu(t: Trace, cpu_ops, pid) -> None:
    busy = {"compute": [], "communication": []}
    for s, end, name, p in cpu_ops:
        if p != pid:
            continue
        kind = ("communication" if name.startswith(COMM_PREFIXES)
                else "compute")
        busy[kind].append((s, end))
        t.ops.append((s, end, kind, name))
    t.busy.update({k: union(v) for k, v in busy.items()}, other=[])
    # An op that encloses a c10d call or the DataLoader's work (the autograd
    # hook that launches a bucket, a collate) is not compute for that
    # stretch: cut those out of the compute set.
    calls = [(s, e) for s, e, kind, name in t.ops
             if kind == "communication" and not name.startswith("gloo:")]
    t.busy["compute"] = subtract(t.busy["compute"],
                                 union(calls + t.busy["data"]))


def _read_gpu(t: Trace, gpu, launch, first_by_corr, step_names, last_start,
              path) -> None:
    cpu = sorted((s, e, n) for n, (s, e) in t.cpu_steps.items())
    starts = [s for s, _, _ in cpu]
    # _filter_irrelevant_gpu_kernels: launched before the last step began
    filtering = len(step_names) > 1
    last = last_start if filtering else math.inf
    busy = {"compute": [], "communication": [], "other": []}
    for s, end, name, corr, stream in gpu:
        if stream == -1:
            continue                    # Event/Context Sync: not split
        typ = kernel_type(name)
        kind = KIND_OF_TYPE.get(typ, "other")
        busy[kind].append((s, end))
        t.ops.append((s, end, kind, name))
        if corr is None:                # a CPU event on a stream
            if s < last:
                t.kernels.append((s, end, typ, None))
            continue
        when = launch.get(corr)
        if when is not None:
            t.launches.append((s, when))
        if filtering and not first_by_corr.get(corr, math.inf) < last:
            continue
        step = None
        if when is not None:            # add_iteration
            i = bisect.bisect_right(starts, when) - 1
            if i >= 0 and when < cpu[i][1]:
                step = cpu[i][2]
        t.kernels.append((s, end, typ, step))
    t.kernels.sort(key=lambda k: k[0])
    if not t.kernels:
        raise ValueError(f"{path}: a GPU trace, but no kernel was launched "
                         "before the last ProfilerStep")
    t.busy.update({k: union(v) for k, v in busy.items()})
    spans: dict[int, list[float]] = {}
    for s, end, _, n in t.kernels:
        if n is not None:
            sp = spans.setdefault(n, [s, end])
            sp[0], sp[1] = min(sp[0], s), max(sp[1], end)
    t.steps = sorted((n, lo, hi) for n, (lo, hi) in spans.items())
    last_n = max(cpu)[2] if filtering else None
    t.empty_steps = [n for _, _, n in cpu if n not in spans and n != last_n]
