"""scripts/grade.py as an instructor uses it: one `grade` run over a folder
of submissions of one cheap assignment (lab 2: formulas, no torchrun),
with a short hang limit; then the bad inputs, which stop before grading.

nbval is not a grading check (it passes a blank student notebook): here
otter's autograder grades each notebook.
"""
import copy
import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import assignments  # noqa: E402
import grade  # noqa: E402

LAB = "02_collectives"  # no launch: 3-6 have build-it runs
HANG_S = 90  # above one honest submission (~10 s idle, ~55 s on a loaded
#             2-core machine), short enough for make test


@pytest.fixture(scope="module")
def built():
    """The lab's student notebook, answer key and autograder (built by
    tests/test_assignments.py earlier in `make test`, else here)."""
    a = assignments.OUT
    paths = (a / "student" / f"{LAB}.ipynb", a / "solution" / f"{LAB}.ipynb",
             a / "autograder" / f"{LAB}.zip")
    if not all(p.exists() for p in paths):
        assert assignments.main(["--only", "collectives"]) == 0
    return [json.loads(p.read_text()) for p in paths[:2]]


def edit(nb, find: str, source: str):
    """A copy of ``nb`` whose (first) code cell containing ``find`` now
    reads ``source``."""
    nb = copy.deepcopy(nb)
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code"
                and find in "".join(c["source"]))
    cell["source"] = source
    return nb


def run_grade(folder: Path, out: Path, *extra) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"),
                           str(folder), "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=900)


def read(out: Path) -> dict:
    """{(student file, question): row}."""
    with (out / "grades.csv").open() as f:
        return {(r["student_file"], r["question"]): r for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def graded(built, tmp_path_factory):
    student, solution = built
    subs = tmp_path_factory.mktemp("submissions")
    out = tmp_path_factory.mktemp("grades")
    (out / "grades.csv").write_text("an earlier run\n")

    def put(name, nb):
        (subs / name).write_text(json.dumps(nb))

    put(f"{LAB}_solution.ipynb", solution)
    put(f"{LAB}_blank.ipynb", student)
    put(f"{LAB}_one_wrong.ipynb",
        edit(solution, "t_2 =", "t_2 = 1.0\nt_8 = 2.0\n"))
    put(f"{LAB}_syntax.ipynb",
        edit(solution, "t_2 =", "t_2 = (4 *\n"))
    put(f"{LAB}_a_hang.ipynb", edit(solution, "t_2 =",
                                  "import time\ntime.sleep(100_000)\n"))
    put("alice.ipynb", solution)  # renamed: the lab comes from its metadata
    (subs / f"{LAB}_bob.ipynb").write_text("my answers: 41, 20\n")
    r = run_grade(subs, out, "--timeout", str(HANG_S), "--jobs", "3")
    return r, out


def test_grade_run_goes_on(graded):
    r, out = graded
    assert r.returncode == 0, r.stdout + r.stderr
    assert "7 submissions" in r.stdout


def test_solution_full_marks(graded):
    rows = read(graded[1])
    for q in ("q1_ring_bytes", "q2_crossover", "q3_busbw"):
        row = rows[f"{LAB}_solution.ipynb", q]
        assert float(row["points"]) == float(row["max"]) > 0, row
        assert row["lab"] == LAB and row["reason"] == ""


def test_blank_student_notebook_scores_zero(graded):
    rows = read(graded[1])
    blank = [r for (f, _), r in rows.items() if f == f"{LAB}_blank.ipynb"]
    assert len(blank) == 3
    assert all(float(r["points"]) == 0 and r["reason"] for r in blank)


def test_one_wrong_answer_loses_that_question_only(graded):
    rows = read(graded[1])
    got = {q: float(rows[f"{LAB}_one_wrong.ipynb", q]["points"])
           for q in ("q1_ring_bytes", "q2_crossover", "q3_busbw")}
    assert got["q3_busbw"] == 0
    assert got["q1_ring_bytes"] == 2 and got["q2_crossover"] == 3
    assert rows[f"{LAB}_one_wrong.ipynb", "q3_busbw"]["reason"]


def test_broken_notebooks_have_a_reason(graded):
    rows = read(graded[1])
    syntax = rows[f"{LAB}_syntax.ipynb", "q3_busbw"]
    assert float(syntax["points"]) == 0 and syntax["reason"]
    assert float(rows[f"{LAB}_syntax.ipynb", "q1_ring_bytes"]["points"]) == 2
    hang = [r for (f, _), r in rows.items() if f == f"{LAB}_a_hang.ipynb"]
    assert hang and all(float(r["points"]) == 0 and "hang" in r["reason"]
                        for r in hang)
    bob = [r for (f, _), r in rows.items() if f == f"{LAB}_bob.ipynb"]
    assert bob and all(float(r["points"]) == 0 and "not a notebook"
                       in r["reason"] for r in bob)
    alice = [r for (f, _), r in rows.items() if f == "alice.ipynb"]
    assert alice and all(float(r["points"]) == float(r["max"])
                         and "metadata" in r["reason"] for r in alice)


def test_earlier_grades_kept(graded):
    kept = list(graded[1].glob("grades.csv.*"))
    assert len(kept) == 1 and kept[0].read_text() == "an earlier run\n"


@pytest.mark.parametrize("case", ["missing", "empty", "unknown_lab", "pdf",
                                  "nbformat3"])
def test_bad_input_one_line_exit_2(case, built, tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "out"
    out.mkdir()
    (out / "grades.csv").write_text("earlier\n")
    if case != "missing":
        subs.mkdir()
    if case == "unknown_lab":
        (subs / "99_nothing.ipynb").write_text(json.dumps(
            {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    if case == "nbformat3":
        (subs / f"{LAB}.ipynb").write_text(json.dumps(
            {"nbformat": 3, "worksheets": [{"cells": []}], "metadata": {}}))
    if case == "pdf":
        (subs / f"{LAB}.ipynb").write_text(json.dumps(built[0]))
        (subs / "homework.pdf").write_bytes(b"%PDF-1.4")
    r = run_grade(subs, out)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("grade: "), r.stderr
    assert [p.name for p in out.iterdir()] == ["grades.csv"]
    assert (out / "grades.csv").read_text() == "earlier\n"
