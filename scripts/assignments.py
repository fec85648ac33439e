"""Build every lab's assignment: a student notebook and an autograder archive.

    python scripts/assignments.py                 # every labs/assignments/NN_*.ipynb
    python scripts/assignments.py --only memory   # one lab
    make assignments

Each lab has one otter-grader master, ``labs/assignments/NN_<lab>.ipynb``:
its questions, their solutions between otter's ``# BEGIN SOLUTION`` /
``# END SOLUTION`` markers, public tests and hidden tests. It drives the
lab's own ``labkit`` functions and runs (never a copy of the lab's code).
For each master found, ``otter assign`` writes

- ``_build/assignments/student/NN_<lab>.ipynb``: no solutions, no hidden
  tests, no outputs (hand this out);
- ``_build/assignments/autograder/NN_<lab>.zip``: what
  ``scripts/grade.py`` (``make grade``) grades with;
- ``_build/assignments/solution/NN_<lab>.ipynb``: the answer key (the
  notebook with solutions and every test), for instructors only.

The book links each lab page to its student notebook
(scripts/handouts.py, called by scripts/build_book.py: the copy built
here, or one made without running the solutions), never to the master.

``otter assign`` runs the solutions against their own tests (which executes
the master, real runs included; a build-it's own run is deferred as in a
student's jail, its hidden tests' rerun is not) and refuses a master whose
solutions fail:
this script then exits 1 and shows otter's output. So does a student cell
that does not compile as handed out (``uncompilable``: e.g. a multi-line
``# SOLUTION`` turned into a broken skeleton) and a student notebook that
still holds a solution marker or a hidden test (``leaked``). The notebook's
first cell finds its own file whatever the student renamed it to
(``find_notebook``). Masters are discovered by
glob, so a new lab's master needs no change here. Every build has a time
limit; the table at the end gives each master's status and seconds.
Otter is imported once for all masters (scripts/otter_once.py: each
master is still its own process, forked from that one).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from labkit.launch import checkout_pythonpath  # noqa: E402

MASTERS = ROOT / "labs" / "assignments"
OUT = ROOT / "_build" / "assignments"
LEAKS = ("# SOLUTION", "# BEGIN SOLUTION", "hidden: true")


def discover(only: list[str] | None = None) -> dict[str, Path]:
    """``{"01_memory": labs/assignments/01_memory.ipynb, ...}``."""
    found = {p.stem: p for p in sorted(MASTERS.glob("[0-9]*_*.ipynb"))}
    if only:
        unknown = [o for o in only
                   if not any(k.partition("_")[2] == o or k == o for k in found)]
        if unknown:
            raise SystemExit(f"assignments: no master for {', '.join(unknown)}"
                             f" (masters: {', '.join(found) or 'none'})")
        found = {k: p for k, p in found.items()
                 if k in only or k.partition("_")[2] in only}
    return found


def leaked(student: Path) -> list[str]:
    """Solution markers or hidden tests left in a student notebook."""
    text = "\n".join("".join(c["source"]) for c in
                     json.loads(student.read_text())["cells"])
    return [m for m in LEAKS if m in text]


def uncompilable(student: Path) -> list[str]:
    """``cell N line L: message`` for each student code cell that does not
    compile as handed out (IPython magics translated first, as Jupyter
    does)."""
    from IPython.core.inputtransformer2 import TransformerManager
    tm, bad = TransformerManager(), []
    cells = json.loads(student.read_text())["cells"]
    for i, c in enumerate(cells):
        if c["cell_type"] != "code":
            continue
        try:
            compile(tm.transform_cell("".join(c["source"])), f"cell {i}",
                    "exec")
        except SyntaxError as e:
            bad.append(f"cell {i} line {e.lineno}: {e.msg}: "
                       f"{(e.text or '').strip()[:60]}")
    return bad


# The handed-out notebook names its own file for otter; a student who
# renamed it would break every check. Find it instead: the one notebook in
# the folder that holds this assignment's name in its metadata.
FIND = '''import glob, json, otter
_mine = [p for p in sorted(glob.glob("*.ipynb")) if json.load(open(p))
         .get("metadata", {{}}).get("otter", {{}})
         .get("assignment_name") == {name!r}]
if len(_mine) != 1:
    raise RuntimeError("keep this notebook alone in its folder (found "
                       f"{{len(_mine)}} notebooks of assignment {name})")
grader = otter.Notebook(_mine[0])
'''


def find_notebook(student: Path, name: str) -> None:
    """Replace the ``otter.Notebook("NN_lab.ipynb")`` line with ``FIND``."""
    nb = json.loads(student.read_text())
    for c in nb["cells"]:
        if c["cell_type"] == "code" and "otter.Notebook(" in "".join(
                c["source"]):
            c["source"] = FIND.format(name=name).splitlines(keepends=True)
            break
    student.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def setup_cells(master: Path) -> list[str]:
    """The master's code cells outside every question, in order: the
    grader runs them itself (scripts/grading/evaluate.py) before the
    tests, so no name a test reads comes from a student's kernel."""
    out, depth = [], 0
    for c in json.loads(master.read_text())["cells"]:
        src = "".join(c["source"])
        if c["cell_type"] == "raw" and src.startswith("# BEGIN QUESTION"):
            depth += 1
        elif c["cell_type"] == "raw" and src.startswith("# END QUESTION"):
            depth -= 1
        elif c["cell_type"] == "code" and depth == 0:
            out.append(src)
    return out


def _finish(name: str, master: Path, folder: Path, rc, seconds: float,
            log: str) -> dict:
    """One master's row of ``build_all``: its student notebook, answer
    key and autograder copied to ``OUT`` when otter made them and they
    pass the checks."""
    if rc is None:
        return {"name": name, "status": "TIMEOUT", "seconds": seconds,
                "log": log + f"\nno result after {seconds:.0f} s: killed"}
    student = folder / "out" / "student" / master.name
    solution = folder / "out" / "autograder" / master.name
    zips = sorted((folder / "out" / "autograder").glob("*.zip"))
    if rc != 0 or not student.exists() or not zips:
        return {"name": name, "status": "FAILED", "seconds": seconds,
                "log": log}
    bad = leaked(student)
    if bad:
        return {"name": name, "status": "FAILED", "seconds": seconds,
                "log": f"student notebook still holds {bad}"}
    broken = uncompilable(student)
    if broken:
        return {"name": name, "status": "FAILED", "seconds": seconds,
                "log": "student cells that do not compile as handed "
                "out:\n  " + "\n  ".join(broken)}
    find_notebook(student, name)
    for sub in ("student", "autograder", "solution"):
        (OUT / sub).mkdir(parents=True, exist_ok=True)
    shutil.copy2(student, OUT / "student" / master.name)
    shutil.copy2(solution, OUT / "solution" / master.name)
    shutil.copy2(zips[-1], OUT / "autograder" / f"{name}.zip")
    return {"name": name, "status": "ok", "seconds": seconds, "log": ""}


def build_all(masters: list[tuple[str, Path]], jobs: int,
              timeout: float) -> list[dict]:
    """``otter assign`` each master (``jobs`` at a time, in this order,
    each within ``timeout`` seconds; one otter import for all:
    scripts/otter_once.py) and check what it made; one row per master."""
    from otter_once import assign_all
    # a build-it's own run (the part's CONFIG) is deferred as in a student's
    # jail: its hidden tests grade their own rerun (HIDDEN) of the key, and
    # tests/test_buildit.py runs the key at CONFIG; the answer key keeps no
    # outputs, so nothing shown is lost (one launch a build-it, ~18 CPU-s)
    env = dict(os.environ, PYTHONPATH=checkout_pythonpath(),
               LABKIT_BUILDIT_DEFER="1")
    with tempfile.TemporaryDirectory(prefix="assign-") as tmp:
        items = [(n, m, Path(tmp) / n) for n, m in masters]
        rows = {}

        def finish(name, rc, seconds):   # as each ends: kept if the rest
            f = Path(tmp) / name / "otter.log"   # is interrupted
            log = f.read_text(errors="replace") if f.exists() else ""
            rows[name] = _finish(name, dict(masters)[name], Path(tmp) / name,
                                 rc, seconds, log)
        _, zygote = assign_all(items, jobs, timeout, True, env, finish)
    for r in rows.values():     # no log of its own: the zygote's says why
        if r["status"] != "ok" and not r["log"].strip():
            r["log"] = zygote
    return [rows[n] for n, _ in masters]


def build(name: str, master: Path, timeout: float) -> dict:
    """``build_all`` of one master."""
    return build_all([(name, master)], 1, timeout)[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", default=[],
                    help="just this lab (e.g. 'memory'); repeatable")
    ap.add_argument("--jobs", type=int, default=3,
                    help="masters built at once (default 3)")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds per master (default 600)")
    a = ap.parse_args(argv)
    masters = discover(a.only)
    if not masters:
        print(f"assignments: no master in {MASTERS.relative_to(ROOT)}")
        return 2
    t0 = time.perf_counter()
    # the masters that launch real runs take longest: start them first
    order = sorted(masters.items(),
                   key=lambda kv: "launch(" not in kv[1].read_text())
    rows = build_all(order, a.jobs, a.timeout)
    rows.sort(key=lambda r: r["name"])
    for r in rows:
        if r["status"] != "ok":
            log = OUT / "logs" / f"{r['name']}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(r["log"])
            text = r["log"] if len(r["log"]) <= 8000 else (
                r["log"][:3000] + "\n[...]\n" + r["log"][-5000:])
            print(f"--- {r['name']}: {r['status']} (whole log: "
                  f"{log.relative_to(ROOT)})\n{text}")
    print(f"\n{'assignment':28s} {'status':8s} {'seconds':>8s}")
    for r in rows:
        print(f"{r['name']:28s} {r['status']:8s} {r['seconds']:8.1f}")
    print(f"{len(rows)} masters in {time.perf_counter() - t0:.1f} s -> "
          f"{OUT.relative_to(ROOT)}/{{student,autograder,solution}}")
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
