"""Grade a folder of handed-in assignment notebooks, locally, without Docker.

    python scripts/grade.py SUBMISSIONS                 # every *.ipynb in it
    python scripts/grade.py SUBMISSIONS --timeout 120   # seconds per notebook
    make grade SUBMISSIONS=path/to/folder

Needs the autograders of ``make assignments``
(``_build/assignments/autograder/NN_<lab>.zip``). Each notebook is matched to
its lab by the assignment name ``otter assign`` wrote into its metadata, or
else by its file name (``NN_<lab>...ipynb``), and graded with ``otter run``
in its own process session under a time limit. Writes
``_build/grades/grades.csv`` (student file, lab, question, points, max,
reason) and prints a summary table. An earlier grades.csv is kept under a
time-stamped name (``grades.csv.<time stamp>``), never overwritten.

A submission that crashes, hangs past the time limit or is not a notebook
gets zero for what could not be run, with the reason in the CSV; the others
are graded all the same. Bad input stops before anything is graded or
moved, with one line and exit status 2: a missing or empty folder, a file
that is not a ``.ipynb`` notebook, a notebook of another format than
nbformat 4, a notebook for an unknown lab.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))
from assignments import OUT as ASSIGNMENTS, run_group  # noqa: E402
from run_labs import keep_previous  # noqa: E402
from labkit.launch import checkout_pythonpath  # noqa: E402

AUTOGRADERS = ASSIGNMENTS / "autograder"
OUT = ROOT / "_build" / "grades"
FIELDS = ("student_file", "lab", "question", "points", "max", "reason")


class BadInput(Exception):
    """Stop before grading: one line, exit status 2."""


def questions(autograder: Path) -> dict[str, float]:
    """``{question: points}`` from the OK-format tests in an autograder."""
    out = {}
    with zipfile.ZipFile(autograder) as z:
        for name in sorted(z.namelist()):
            if name.startswith("tests/") and name.endswith(".py"):
                scope: dict = {}
                exec(z.read(name).decode(), scope)  # our own test files
                out[scope["test"]["name"]] = float(scope["test"]["points"])
    return out


def identify(path: Path, labs: set[str]) -> tuple[str | None, dict | None, str]:
    """(lab, notebook or None when it is not one, note) for a submission."""
    by_name = next((lab for lab in sorted(labs, key=len, reverse=True)
                    if path.stem.startswith(lab)), None)
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(nb, dict) or "nbformat" not in nb:
            raise ValueError("no nbformat field")
    except (ValueError, UnicodeDecodeError) as e:
        return by_name, None, f"not a notebook ({str(e).splitlines()[0][:80]})"
    meta = nb.get("metadata", {}).get("otter", {}).get("assignment_name")
    if meta in labs:
        note = "" if by_name == meta else (
            f"file name does not name the lab; graded as {meta} "
            "from its metadata")
        return meta, nb, note
    return by_name, nb, ""


def collect(folder: Path, labs: set[str]) -> list[tuple[Path, str, str, bool]]:
    """Check the whole folder first: (file, lab, note, is_notebook) each."""
    if not folder.is_dir():
        raise BadInput(f"no such folder: {folder}")
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not any(
        part.startswith(".") for part in p.relative_to(folder).parts))
    if not files:
        raise BadInput(f"{folder} holds no submission")
    if not labs:
        raise BadInput(f"no autograder in {AUTOGRADERS.relative_to(ROOT)}: "
                       "run `make assignments` first")
    out = []
    for p in files:
        if p.suffix != ".ipynb":
            raise BadInput(f"{p.relative_to(folder)} is not a notebook "
                           "(.ipynb): hand in the assignment notebook")
        lab, nb, note = identify(p, labs)
        if nb is not None and nb.get("nbformat") != 4:
            raise BadInput(f"{p.relative_to(folder)}: a notebook of format "
                           f"{nb.get('nbformat')!r}, not a Jupyter notebook "
                           "of format 4")
        if lab is None and nb is not None:
            raise BadInput(f"{p.relative_to(folder)}: unknown lab (known: "
                           f"{', '.join(sorted(labs))})")
        out.append((p, lab, note, nb is not None))
    return out


def reason_of(output: str) -> str:
    """The first informative line of a failed test's output."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for ln in lines:
        if re.search(r"(Error|Exception|assert)", ln) and "results:" not in ln:
            return ln[:160]
    return (lines[-1] if lines else "failed")[:160]


def grade_one(path: Path, lab: str, note: str, folder: Path,
              timeout: float) -> list[dict]:
    student = str(path.relative_to(folder))
    qs = questions(AUTOGRADERS / f"{lab}.zip")

    def zeros(reason: str) -> list[dict]:
        return [dict(student_file=student, lab=lab, question=q, points=0.0,
                     max=m, reason=reason) for q, m in qs.items()]

    with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
        sub = Path(tmp) / f"{lab}.ipynb"  # otter wants one notebook; name it
        shutil.copy2(path, sub)
        env = dict(os.environ, PYTHONPATH=checkout_pythonpath())
        rc, log = run_group([sys.executable, "-m", "otter", "run", "--no-logo",
                             "-a", str(AUTOGRADERS / f"{lab}.zip"),
                             "-o", tmp, str(sub)], timeout, cwd=tmp, env=env)
        if rc is None:
            return zeros(f"hang: no result after {timeout:.0f} s (killed)")
        result = Path(tmp) / "results.json"
        if not result.exists():
            last = [ln for ln in log.splitlines() if ln.strip()][-1:] or [""]
            return zeros(f"grader crashed (exit {rc}): {last[0][:140]}")
        tests = {t["name"]: t for t in json.loads(result.read_text())["tests"]
                 if "max_score" in t}
    rows = []
    for q, m in qs.items():
        t = tests.get(q)
        if t is None:
            rows.append(dict(student_file=student, lab=lab, question=q,
                             points=0.0, max=m, reason="not graded"))
            continue
        points = float(t.get("score") or 0.0)
        reason = "" if points >= m else reason_of(t.get("output", ""))
        rows.append(dict(student_file=student, lab=lab, question=q,
                         points=points, max=m,
                         reason="; ".join(x for x in (note, reason) if x)))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("submissions", type=Path,
                    help="folder of handed-in notebooks")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds per notebook before it counts as a hang")
    ap.add_argument("--jobs", type=int, default=1,
                    help="notebooks graded at once (default 1)")
    ap.add_argument("--out", type=Path, default=OUT,
                    help="folder for grades.csv (default _build/grades)")
    a = ap.parse_args(argv)
    labs = {p.stem for p in AUTOGRADERS.glob("*.zip")}
    folder = a.submissions
    try:
        if str(folder) in ("", "."):
            raise BadInput("say which folder: make grade SUBMISSIONS=<folder>")
        subs = collect(folder, labs)
    except BadInput as e:
        print(f"grade: {e}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()

    def one(item):
        path, lab, note, is_nb = item
        student = str(path.relative_to(folder))
        if not is_nb:
            qs = questions(AUTOGRADERS / f"{lab}.zip") if lab else {"all": None}
            return [dict(student_file=student, lab=lab or "unknown",
                         question=q, points=0.0, max=m, reason=note)
                    for q, m in qs.items()]
        try:
            return grade_one(path, lab, note, folder, a.timeout)
        except Exception as e:  # one bad submission never stops the others
            return [dict(student_file=student, lab=lab, question="all",
                         points=0.0, max=None,
                         reason=f"grading error: {type(e).__name__}: {e}"[:160])]

    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        rows = [r for rs in pool.map(one, subs) for r in rs]
    a.out.mkdir(parents=True, exist_ok=True)
    csv_path = a.out / "grades.csv"
    kept = keep_previous(csv_path)
    with csv_path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"\n{'student file':36s} {'lab':22s} {'points':>7s} {'max':>5s}  "
          "notes")
    for path, lab, *_ in subs:
        student = str(path.relative_to(folder))
        mine = [r for r in rows if r["student_file"] == student]
        got = sum(r["points"] for r in mine)
        most = sum(r["max"] or 0 for r in mine)
        notes = sorted({r["reason"] for r in mine if r["reason"]})
        print(f"{student:36s} {lab or 'unknown':22s} {got:7.1f} {most:5.0f}  "
              + " | ".join(notes)[:120])
    print(f"\n{len(subs)} submissions in {time.perf_counter() - t0:.1f} s -> "
          f"{csv_path}" + (f" (earlier grades kept as {kept.name})"
                           if kept else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
