"""Peak memory of ``python -m labkit profile`` on a large trace.

    python scripts/bench_trace_memory.py             # a 500 MB trace
    python scripts/bench_trace_memory.py --mb 100 --budget-gb 1

Builds a trace of ``--mb`` megabytes (uncompressed JSON) from the real
34 MB A100 trace in ``../shared/traces`` -- its events repeated, each copy
shifted in time, its steps and correlation ids renumbered, so the result
is a longer run of the same job -- then runs ``python -m labkit profile``
on it and reports the child's peak resident memory (``ru_maxrss``) and
seconds beside the budget (1 GB), with their ratio. The trace is written
to a temporary folder and deleted.
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACE = next((d / "traces" / "gpu-a100-8rank-alltoall" / "rank-3.json.gz"
              for d in (ROOT.parent / "shared", ROOT.parent.parent / "shared")
              if (d / "traces").is_dir()), ROOT.parent / "shared")
STEP = re.compile(r"(ProfilerStep\s*#\s*)(\d+)")


def build(out: Path, mb: float) -> int:
    data = json.loads(gzip.decompress(TRACE.read_bytes()))
    events = data.pop("traceEvents")
    spans = [e["ts"] + e.get("dur", 0) for e in events
             if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))]
    t0, span = min(spans), max(spans) - min(spans) + 1000
    steps = {int(m.group(2)) for e in events if isinstance(e, dict)
             and (m := STEP.search(str(e.get("name", ""))))}
    corr_span = 1 + max((e.get("args") or {}).get("correlation", 0) or 0
                        for e in events if isinstance(e, dict))
    target, written, copy = mb * 1e6, 0, 0
    with open(out, "w") as f:
        head = json.dumps(data)[:-1]
        f.write(head + ', "traceEvents": [')
        first = True
        while written < target:
            shift, dstep = copy * span, copy * (max(steps) + 1)
            for e in events:
                if not isinstance(e, dict):
                    continue
                if copy and e.get("ph") == "M":
                    continue
                e = dict(e)
                if isinstance(e.get("ts"), (int, float)):
                    e["ts"] = e["ts"] + shift
                if isinstance(e.get("name"), str) and "ProfilerStep" in \
                        e["name"]:
                    e["name"] = STEP.sub(lambda m: m.group(1) + str(
                        int(m.group(2)) + dstep), e["name"])
                args = e.get("args")
                if isinstance(args, dict) and isinstance(
                        args.get("correlation"), int) and \
                        args["correlation"] >= 0:
                    e["args"] = {**args, "correlation":
                                 args["correlation"] + copy * corr_span}
                text = ("" if first else ",") + json.dumps(e)
                first = False
                f.write(text)
                written += len(text)
            copy += 1
        f.write("]}")
    return copy


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=500)
    ap.add_argument("--budget-gb", type=float, default=1.0)
    a = ap.parse_args(argv)
    if not TRACE.exists():
        print(f"skipped: {TRACE} not found")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "rank-0.json"
        copies = build(big, a.mb)
        size = big.stat().st_size
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "labkit", "profile",
                            str(big)], cwd=ROOT, capture_output=True,
                           text=True)
        seconds = time.perf_counter() - t
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    status = "ok" if r.returncode == 0 and peak < a.budget_gb * 1e9 \
        else "FAILED"
    print(f"labkit profile, {size / 1e6:.0f} MB trace ({copies} copies of "
          f"the A100 trace): peak {peak / 1e9:.3f} GB (budget "
          f"{a.budget_gb:g} GB, ratio {peak / (a.budget_gb * 1e9):.2f}), "
          f"{seconds:.1f} s, rc {r.returncode}: {status}")
    if r.returncode:
        print(r.stderr.strip()[-500:])
    return 0 if status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
