"""What grading costs, for scripts/benchmark.py: ``make assignments`` and
one grading per assignment, ``make grade`` of a class of honest
submissions, and the load tests that need the machine to themselves.

    python scripts/benchmark.py --grade-class     # the class alone
    python scripts/benchmark.py --no-labs         # these and the trace
"""
from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENTS_BUDGET_S = 60.0
GRADE_ONE_BUDGET_S = 120.0
GRADE_CLASS_BUDGET_S = 180.0   # `make grade` of 12 honest submissions


def row(*args, **kwargs) -> dict:
    from bench_row import row as row_  # one format for every benchmark row
    return row_(*args, **kwargs)


def bench_assignments() -> list[dict]:
    """`make assignments` (every master), then `make grade` on one
    submission per assignment: its answer key."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, str(ROOT / "scripts" /
                                            "assignments.py")],
                       capture_output=True, text=True)
    rows = [row("make assignments", ASSIGNMENTS_BUDGET_S,
                time.perf_counter() - t0,
                "ok" if r.returncode == 0 else "FAILED",
                "" if r.returncode == 0 else r.stdout[-300:])]
    keys = ROOT / "_build" / "assignments" / "solution"
    for key in sorted(keys.glob("*.ipynb")) if r.returncode == 0 else []:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "in").mkdir()
            shutil.copy2(key, Path(tmp) / "in" / key.name)
            t0 = time.perf_counter()
            g = subprocess.run([sys.executable, str(ROOT / "scripts" /
                                                    "grade.py"),
                                str(Path(tmp) / "in"), "--out", tmp],
                               capture_output=True, text=True)
            seconds = time.perf_counter() - t0
            with open(Path(tmp) / "grades.csv", newline="") as f:
                # the key must get every point, with no reason given
                lost = [",".join(r.values()) for r in csv.DictReader(f)
                        if r["reason"] or r["points"] != r["max"]]
        ok = g.returncode == 0 and not lost
        rows.append(row(f"grade one submission ({key.stem})",
                        GRADE_ONE_BUDGET_S, seconds,
                        "ok" if ok else "FAILED",
                        "" if ok else (lost or [g.stderr[-200:]])[0]))
    return rows


def bench_grade_class(n: int = 12) -> list[dict]:
    """`make grade` at the default jobs of ``n`` honest submissions: the
    built answer keys (Colossal-AI's left out: its own environment),
    taken in order and cycled to ``n``; the load average beside it."""
    keys = sorted(k for k in (ROOT / "_build" / "assignments" /
                              "solution").glob("*.ipynb")
                  if "colossalai" not in k.stem)
    if not keys:
        return [row(f"grade {n} honest submissions", GRADE_CLASS_BUDGET_S,
                    None, "skipped", "no answer keys: make assignments")]
    with tempfile.TemporaryDirectory() as tmp:
        subs = Path(tmp) / "in"
        subs.mkdir()
        for i in range(n):
            k = keys[i % len(keys)]
            shutil.copy2(k, subs / f"{k.stem}_s{i:02d}.ipynb")
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        g = subprocess.run([sys.executable, str(ROOT / "scripts" /
                                                "grade.py"), str(subs),
                            "--out", tmp], capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        load1 = os.getloadavg()[0]
        lost = []
        if g.returncode == 0:
            with open(Path(tmp) / "grades.csv", newline="") as f:
                lost = [f"{r['student_file']} {r['question']}"
                        for r in csv.DictReader(f)
                        if r["points"] != r["max"]]
    ok = g.returncode == 0 and not lost
    return [row(f"grade {n} honest submissions", GRADE_CLASS_BUDGET_S,
                seconds, "ok" if ok else "FAILED",
                f"load average {load0:.1f} at the start, {load1:.1f} at "
                "the end" + ("" if ok else "; lost: " + (
                    ", ".join(lost)[:200] or g.stderr[-200:])))]


LOAD_TESTS = ["tests/test_grade_measurement.py"]


def bench_load_tests() -> list[dict]:
    """The tests that need the machine to themselves (two CPU burners
    beside ten gradings): skipped by make test, run here."""
    rows = []
    for t in LOAD_TESTS:
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "pytest", t, "-q",
                            "-p", "no:randomly"], cwd=ROOT,
                           env=dict(os.environ, LABKIT_LOAD_TESTS="1"),
                           capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        last = (r.stdout.strip().splitlines() or ["no output"])[-1]
        rows.append(row(f"load test {Path(t).stem}", 2400, seconds,
                        "ok" if r.returncode == 0 else "FAILED", last[:200]))
    return rows
