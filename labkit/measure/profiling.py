"""Where a training step's time goes: compute, communication, data, idle.

    python -m labkit profile RUN_DIR                    # one row per step
    python -m labkit profile RUN_DIR --json             # the same as JSON
    python -m labkit profile RUN_DIR --doctor           # + triage, advice
    python -m labkit profile RUN_DIR --view cpu-window  # the CPU's windows
    python -m labkit profile RUN_DIR --max-memory 1     # at most 1 GB

``RUN_DIR`` holds one Chrome trace per rank (``*.json`` or ``*.json.gz``,
as written by :mod:`labkit.measure.trace.capture` or any ``torch.profiler`` run);
a single trace file works too. Reading is :mod:`labkit.measure.trace.kineto`.

How one rank's trace is split -- by kernel launch, HTA's breakdown (GPU
traces, the default), or by the CPU's ``ProfilerStep`` windows -- is
:mod:`labkit.measure.trace.rank_breakdown`; how the result is shown (table,
bars, timeline) is :mod:`labkit.measure.trace.show`. This file reads a
run folder, averages its steps and is the command line; the names of
those modules stay reachable from here (``profiling.breakdown``, ...).
"""
from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path

from labkit.measure.trace.cpu_window import (  # noqa: F401  (re-exported)
    ORDER, idle_gaps, split)
from labkit.measure.trace.intervals import (  # noqa: F401  (re-exported)
    clip, intersect, subtract, total, union)
from labkit.measure.trace.kineto import (  # noqa: F401  (re-exported)
    KIND_OF_TYPE, Trace, load, read, trace_files)
from labkit.measure.trace.show import (  # noqa: F401 (re-exported)
    COLORS, plot_bars, plot_timeline, table)
from labkit.measure.trace.rank_breakdown import (  # noqa: F401 (re-exported)
    KINDS, VIEWS, breakdown, combine, hta_split, mean_step, top_ops)


def _one(f: Path, view: str = "launch") -> dict:
    return breakdown(read(f), view)


def analyze(run_dir: str | Path, jobs: int | None = None,
            view: str = "launch") -> dict:
    """Read every rank's trace in ``run_dir``; one breakdown per rank
    (``view``: see :func:`breakdown`).

    ``jobs`` processes read the files in parallel (default: one per file,
    up to the cores, when the folder holds more than 20 MB of traces;
    most of the time goes to ``json.loads``, which holds the GIL).
    """
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r} (choose from "
                         f"{', '.join(VIEWS)})")
    files = trace_files(run_dir)
    if jobs is None:
        big = sum(f.stat().st_size for f in files) > 20e6
        jobs = min(len(files), os.cpu_count() or 1) if big else 1
    if jobs > 1 and len(files) > 1:
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            ranks = list(pool.map(partial(_one, view=view), files))
    else:
        ranks = [_one(f, view) for f in files]
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


# -- command line ------------------------------------------------------------

def add_arguments(parser) -> None:
    parser.add_argument("run_dir", help="folder of per-rank Chrome traces "
                        "(*.json, *.json.gz), or one trace file")
    parser.add_argument("--json", action="store_true",
                        help="print the breakdown as JSON")
    parser.add_argument("--doctor", action="store_true",
                        help="add the triage and the doctor's findings")
    parser.add_argument("--view", choices=VIEWS, default="launch",
                        help="GPU traces: steps by kernel launch, HTA's "
                        "way (default), or the CPU's ProfilerStep windows")
    parser.add_argument("--max-memory", type=float, metavar="GB",
                        help="stop, in one line, rather than use more "
                        "memory than this (traces are streamed: a 500 MB "
                        "trace needs under 1 GB)")


def _cap_memory(gb: float | None) -> None:
    if gb:
        import resource
        limit = int(gb * 1e9)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def main(args) -> int:
    _cap_memory(getattr(args, "max_memory", None))
    try:
        report = analyze(args.run_dir, view=args.view)
    except MemoryError:
        raise ValueError(f"{args.run_dir}: reading the traces needs more "
                         f"than --max-memory {args.max_memory:g} GB"
                         if getattr(args, "max_memory", None) else
                         f"{args.run_dir}: out of memory") from None
    if args.doctor:
        from labkit.measure.trace import doctor
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
