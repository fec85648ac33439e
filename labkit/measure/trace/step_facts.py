"""What the doctor reads in a step besides its split: counts, phases,
syncs, and GPU idle the host caused.

    from labkit.measure.trace import step_facts
    step_facts.step_facts(trace, n, lo, hi, busy, gaps)

Used by both views of :mod:`labkit.measure.profiling`: host-side facts
(phases, ``.item()`` calls, synchronize calls) are read in the CPU's
``ProfilerStep`` window, device facts in the step's window ``[lo, hi)``.
"""
from __future__ import annotations

import bisect
import statistics

from labkit.measure.trace.intervals import clip, subtract, total, union
from labkit.measure.trace.kineto import Trace


def host_bound_idle(t: Trace, gaps, slack_us: float = 10.0
                    ) -> tuple[float, float]:
    """GPU idle in the idle ``gaps`` the host caused: (after a sync, other).

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
    for g0, g1 in gaps:
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


def step_facts(t: Trace, n: int, lo: float, hi: float, busy,
               gaps) -> dict:
    """What the doctor reads besides the split: counts, phases, syncs.

    Host-side facts (phases, ``.item()`` calls, synchronize calls) are
    read in the CPU's ``ProfilerStep`` window, device facts in ``[lo, hi)``
    over the interval sets ``busy`` and the idle ``gaps`` of the step.
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
    exposed = subtract(clip(busy["communication"], lo, hi),
                       union(clip(busy["compute"], lo, hi)
                             + clip(t.busy["data"], lo, hi)))
    c_lo, c_hi = t.cpu_steps.get(n, (lo, hi))
    # GPU: count the calls (the CPU's nccl:<op> annotations in the step);
    # one rank's in-place all-reduce launches no kernel to count
    calls = (bisect.bisect_left(t.comm_calls, c_hi)
             - bisect.bisect_left(t.comm_calls, c_lo))
    backward = clip(t.phases.get("backward", []), lo, hi)
    return {
        "phases_us": {k: total(clip(v, c_lo, c_hi))
                      for k, v in t.phases.items()},
        "collectives": calls if t.comm_calls else len(comm),
        "collective_kernels": len(comm),
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
                   host_bound_idle(t, gaps) if t.device == "gpu"
                   else (0.0, 0.0))),
    }
