"""scripts/assignments.py: every lab has an otter master with 2-4 graded
questions, and `make assignments` builds all of them.

Building runs ``otter assign``, which executes each master (its real runs
included) and refuses one whose solutions fail their own tests; that
execution is the check of the masters' solutions (nbval does not run the
masters: conftest.py ignores labs/assignments). tests/test_grade.py grades
submissions against one of the archives built here.
"""
import json
import os
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import assignments  # noqa: E402

# the first test that reads the built masters pays for the build (about
# 500 s on 2 busy cores); each master is bounded by its own 600 s limit
pytestmark = pytest.mark.timeout(1800)

LABS = sorted(p.stem for p in (ROOT / "labs").glob("[0-9]*_*.ipynb"))
MASTERS = assignments.discover()


def cells(name):
    return json.loads(MASTERS[name].read_text())["cells"]


def source(c):
    return "".join(c["source"])


def test_every_lab_has_a_master():
    assert LABS and sorted(MASTERS) == LABS


@pytest.mark.parametrize("name", sorted(MASTERS))
def test_master_form(name):
    cs = cells(name)
    config = source(cs[0])
    assert cs[0]["cell_type"] == "raw" and "# ASSIGNMENT CONFIG" in config
    assert re.search(rf"^name: {name}$", config, re.M), \
        "the assignment name is the file name: grade.py matches on it"
    params = [c for c in cs if "parameters" in c["metadata"].get("tags", [])]
    assert len(params) == 1 and 'profile = "cpu"' in source(params[0])
    questions = [c for c in cs if c["cell_type"] == "raw"
                 and source(c).startswith("# BEGIN QUESTION")]
    assert 2 <= len(questions) <= 4, f"{len(questions)} questions"
    hidden = sum("hidden: true" in source(c) for c in cs)
    assert hidden >= len(questions), "every question needs a hidden test"
    assert all(not c.get("outputs") for c in cs if c["cell_type"] == "code")


@pytest.fixture(scope="module")
def built():
    # two masters at once: make test's other xdist worker is busy too.
    # The whole build (14 masters, each with its own 600 s limit) runs in
    # the setup of the first test that needs it: CI measured 475-530 s of
    # it, near pytest's 600 s per test; its tests get room (below)
    assert assignments.main(["--jobs", "2"]) == 0
    return assignments.OUT


def test_make_assignments_builds_every_master(built):
    for name in MASTERS:
        student = built / "student" / f"{name}.ipynb"
        assert (built / "autograder" / f"{name}.zip").exists()
        assert (built / "solution" / f"{name}.ipynb").exists()
        nb = nbformat.read(student, as_version=4)
        text = "\n".join(c.source for c in nb.cells)
        assert "otter.Notebook" in text and "grader.check(" in text
        assert not assignments.leaked(student)
        assert all(not c.get("outputs") for c in nb.cells
                   if c.cell_type == "code")
        assert nb.metadata["otter"]["assignment_name"] == name


def test_a_master_whose_solution_fails_is_refused(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python",
                                 "display_name": "Python 3"}
    raw, code = nbformat.v4.new_raw_cell, nbformat.v4.new_code_cell
    nb.cells = [raw("# ASSIGNMENT CONFIG\nname: 99_wrong\ngenerate: true\n"
                    "requirements: null\n"),
                raw("# BEGIN QUESTION\nname: q1\npoints: 1"),
                raw("# BEGIN SOLUTION"), code("x = 41  # SOLUTION"),
                raw("# END SOLUTION"), raw("# BEGIN TESTS"),
                code("assert x == 42"), raw("# END TESTS"),
                raw("# END QUESTION")]
    master = tmp_path / "99_wrong.ipynb"
    nbformat.write(nb, master)
    r = assignments.build("99_wrong", master, timeout=300)
    assert r["status"] == "FAILED"
    assert not (assignments.OUT / "student" / "99_wrong.ipynb").exists()


@pytest.mark.parametrize("name", sorted(MASTERS))
def test_public_tests_carry_no_points(name):
    """Points come from the hidden tests only: a public test a student can
    pass with a wrong answer must not score."""
    for c in cells(name):
        src = source(c)
        if c["cell_type"] == "code" and "# BEGIN TEST CONFIG" in src \
                and "hidden: true" not in src:
            assert re.search(r"^points: 0$", src, re.M), src[:200]
    tests = [source(c) for c in cells(name) if c["cell_type"] == "code"
             and "assert" in source(c)]
    public = [t for t in tests if "hidden: true" not in t]
    assert all("# BEGIN TEST CONFIG" in t for t in public), \
        "a public test without its config (points: 0)"


def test_every_student_cell_compiles(built):
    for name in MASTERS:
        assert assignments.uncompilable(
            built / "student" / f"{name}.ipynb") == [], name


def test_a_skeleton_that_does_not_compile_is_refused(tmp_path):
    """A multi-line ``# SOLUTION`` turns into a broken skeleton: refused."""
    student = tmp_path / "s.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('x = {"a": ...,\n    ...\n'),
                nbformat.v4.new_code_cell("%time y = 1\n!ls")]
    nbformat.write(nb, student)
    bad = assignments.uncompilable(student)
    assert len(bad) == 1 and bad[0].startswith("cell 0")


def test_a_renamed_notebook_finds_itself(built, tmp_path):
    """The first cell locates the notebook by its metadata, so a student
    may rename the file; two copies in one folder get one clear line."""
    name = "02_collectives"
    nb = json.loads((built / "student" / f"{name}.ipynb").read_text())
    init = next("".join(c["source"]) for c in nb["cells"]
                if "otter.Notebook(" in "".join(c["source"]))
    (tmp_path / "my homework.ipynb").write_text(json.dumps(nb))
    code = init.replace("import glob, json, otter",
                        "import glob, json\nclass otter:\n"
                        "    Notebook = staticmethod(lambda p: p)")
    scope: dict = {}
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        exec(code, scope)
        assert scope["grader"] == "my homework.ipynb"
        (tmp_path / "copy.ipynb").write_text(json.dumps(nb))
        with pytest.raises(RuntimeError, match="alone in its folder"):
            exec(code, {})
    finally:
        os.chdir(cwd)


def test_setup_cells_are_the_code_outside_questions():
    setup = assignments.setup_cells(MASTERS["02_collectives"])
    assert any("import collectives as C" in s for s in setup)
    assert not any("allreduce_time" in s for s in setup)
