"""The profiler's kernel view: which GPU kernels a step's time went to.

    from labkit.measure.trace import kernels
    rows = kernels.table(kineto.load("traces/rank-0.json.gz"), top=10)
    python -m labkit.measure.trace.kernels traces/rank-0.json.gz   # the table

Step 3 of chapter 7's triage order, once the step's time is split into
compute, communication, data and idle: group the kernels of a Chrome trace
by name and sort by total time -- what ``prof.key_averages().table(
sort_by="cuda_time_total")`` prints inside the run (``device_time_total``
in recent PyTorch), read here from the saved trace so that any rank's file
can be studied later. Each row also gives the kernel's kind (HTA's rules,
:func:`labkit.measure.trace.hta_breakdown.kernel_type`) and its estimated
achieved occupancy: Kineto writes ``est. achieved occupancy %`` for each
kernel (resident warps per SM over the SM's maximum, from the launch
configuration, registers and shared memory -- an estimate, not a hardware
counter; Nsight Compute measures the real one). Averaged weighted by
duration, so a long kernel counts for its time.
"""
from __future__ import annotations

import sys
from collections import defaultdict

from labkit.measure.trace.hta_breakdown import kernel_type
from labkit.measure.trace.kineto import load

OCCUPANCY = "est. achieved occupancy %"


def table(trace: dict, top: int | None = 10) -> list[dict]:
    """Kernels of ``trace`` (a loaded Chrome trace) grouped by name, the
    longest total first: name, kind, calls, total and mean microseconds,
    share of all kernel time (%), duration-weighted occupancy (% or None)."""
    acc: dict = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for e in trace["traceEvents"]:
        if e.get("cat") != "kernel" or not isinstance(e.get("dur"),
                                                       (int, float)):
            continue
        a = acc[e["name"]]
        a[0] += 1
        a[1] += e["dur"]
        occ = (e.get("args") or {}).get(OCCUPANCY)
        if isinstance(occ, (int, float)):
            a[2] += occ * e["dur"]
            a[3] += e["dur"]
    whole = sum(a[1] for a in acc.values())
    rows = [{"kernel": name, "kind": kernel_type(name), "calls": a[0],
             "total_us": a[1], "mean_us": a[1] / a[0],
             "share_pct": 100 * a[1] / whole if whole else 0.0,
             "occupancy_pct": a[2] / a[3] if a[3] else None}
            for name, a in acc.items()]
    rows.sort(key=lambda r: -r["total_us"])
    return rows[:top] if top else rows


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m labkit.measure.trace.kernels TRACE.json[.gz]",
              file=sys.stderr)
        return 2
    try:
        rows = table(load(argv[0]))
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    for r in rows:
        occ = "-" if r["occupancy_pct"] is None else \
            f"{r['occupancy_pct']:.0f}%"
        print(f"{r['share_pct']:5.1f}% {r['calls']:6d} "
              f"{r['total_us'] / 1e3:9.2f} ms  occ {occ:>4}  "
              f"{r['kind']:<13} {r['kernel'][:60]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
