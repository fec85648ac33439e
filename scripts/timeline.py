"""Where a test run's wall time went, from its timeline.

    LABKIT_TIMELINE=_build/timeline.jsonl make test
    python scripts/timeline.py _build/timeline.jsonl [--top 25]

The timeline is what conftest.py writes under ``LABKIT_TIMELINE``: one
line per test phase (setup, call, teardown) with its unit (a test module,
a notebook, or a SHARED group), its xdist worker and its start and stop.
Printed: the run's wall time; per worker its busy seconds, when it
finished (its tail: how long the other still ran) and its gaps; the
longest units with their worker and start; and what a longest-first
order of the same unit durations would take on as many workers (list
scheduling, each unit whole), beside the observed wall time. Seconds are
wall seconds inside test phases; beside them, where the timeline has them
(conftest.py adds each phase's CPU seconds: the worker's and its reaped
children's), each unit's CPU seconds and the units that mostly wait
(CPU well under wall: a hang, a timeout, a sleep), where a third worker
would find idle cores.
"""
from __future__ import annotations

import argparse
import heapq
import json
import sys
from collections import defaultdict
from pathlib import Path


def load(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x]


def units(rows: list[dict]) -> dict[str, dict]:
    """``{unit: {"worker", "start", "stop", "busy", "cpu"}}`` (busy: the
    seconds of its phases; cpu: their CPU seconds, None when the timeline
    has none)."""
    out: dict[str, dict] = {}
    for r in rows:
        u = out.setdefault(r["unit"], {"worker": r["worker"],
                                       "start": r["start"],
                                       "stop": r["stop"], "busy": 0.0,
                                       "cpu": None})
        u["start"] = min(u["start"], r["start"])
        u["stop"] = max(u["stop"], r["stop"])
        u["busy"] += r["stop"] - r["start"]
        if r.get("cpu") is not None:
            u["cpu"] = (u["cpu"] or 0.0) + r["cpu"]
    return out


def _cpu(u: dict) -> str:
    return "      -" if u["cpu"] is None else f"{u['cpu']:7.1f}"


def longest_first(durations: list[float], workers: int) -> float:
    """The makespan of list scheduling, longest unit first."""
    free = [0.0] * max(1, workers)
    for d in sorted(durations, reverse=True):
        heapq.heappush(free, heapq.heappop(free) + d)
    return max(free)


def report(rows: list[dict], top: int = 25) -> str:
    if not rows:
        return "empty timeline"
    t0 = min(r["start"] for r in rows)
    end = max(r["stop"] for r in rows)
    us = units(rows)
    per = defaultdict(list)
    for name, u in us.items():
        per[u["worker"]].append(u)
    lines = [f"wall {end - t0:.0f} s in test phases, {len(us)} units, "
             f"{len(per)} worker(s)"]
    for w, ul in sorted(per.items()):
        busy = sum(u["busy"] for u in ul)
        last = max(u["stop"] for u in ul)
        lines.append(f"  {w}: busy {busy:.0f} s, done at {last - t0:.0f} s "
                     f"(tail {end - last:.0f} s), gaps "
                     f"{last - t0 - busy:.0f} s, {len(ul)} units")
    lines.append(f"longest {top} units (seconds, CPU seconds, worker, "
                 f"start s):")
    for name, u in sorted(us.items(), key=lambda kv: -kv[1]["busy"])[:top]:
        lines.append(f"  {u['busy']:7.1f} {_cpu(u)}  {u['worker']:5s} "
                     f"{u['start'] - t0:6.0f}  {name}")
    timed = [u for u in us.values() if u["cpu"] is not None]
    if timed:
        cpu = sum(u["cpu"] for u in timed)
        lines.append(f"CPU {cpu:.0f} s in test phases ({len(timed)} units "
                     f"measured), {cpu / max(end - t0, 1e-9):.2f} cores on "
                     f"average")
        waits = sorted(((u["busy"] - u["cpu"], n) for n, u in us.items()
                        if u["cpu"] is not None), reverse=True)[:top]
        lines.append(f"most waiting ({top}: wall minus CPU seconds):")
        lines += [f"  {w:7.1f}  {n}" for w, n in waits if w > 1]
    lpt = longest_first([u["busy"] for u in us.values()], len(per))
    lines.append(f"longest-first order of these durations on {len(per)} "
                 f"worker(s): {lpt:.0f} s (observed {end - t0:.0f} s)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("timeline", type=Path)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args(argv)
    if not a.timeline.is_file():
        print(f"timeline: no file {a.timeline}", file=sys.stderr)
        return 2
    print(report(load(a.timeline), a.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
