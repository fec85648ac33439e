"""scripts/assignments.py: every lab has an otter master with 2-4 graded
questions, and `make assignments` builds all of them.

Building runs ``otter assign``, which executes each master (its real runs
included) and refuses one whose solutions fail their own tests; that
execution is the check of the masters' solutions (nbval does not run the
masters: conftest.py ignores labs/assignments). tests/test_grade.py grades
submissions against one of the archives built here.
"""
import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import assignments  # noqa: E402

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
    assert assignments.main([]) == 0
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
