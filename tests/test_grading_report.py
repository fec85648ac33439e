"""scripts/grading/report.py and submissions.py: a gradebook that adds up.
One student id source per folder, collisions refused in one line; one
graded file per student and lab (the newest), the others adding
nothing; each lab's maximum the assignment's; the feedback folder
replaced each run; a reason's HTML and Markdown shown, not obeyed."""
import csv
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from grading import report  # noqa: E402
from grading.submissions import (BadInput, collect,  # noqa: E402
                                 name_students, newest)

sys.path.insert(0, str(ROOT / "scripts"))
import grade  # noqa: E402

NB = json.dumps({"cells": [], "metadata": {}, "nbformat": 4,
                 "nbformat_minor": 5})


def folder(tmp_path, names, times=None):
    sub = tmp_path / "in"
    for k, n in enumerate(names):
        p = sub / n
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(NB)
        if times:
            os.utime(p, (times[k], times[k]))
    return collect(sub)


def test_one_source_names_every_student(tmp_path):
    items = folder(tmp_path / "a", ["bob/02_collectives.ipynb",
                                    "g22 eve/02_collectives.ipynb"])
    assert name_students(items)[0] == "folder"
    assert [i.student for i in items] == ["bob", "g22 eve"]
    items = folder(tmp_path / "b", ["bob_11_5_02_collectives.ipynb",
                                    "amy_LATE_12_6_02_x.ipynb"])
    assert name_students(items) == ("canvas", {"amy": "12", "bob": "11"})
    items = folder(tmp_path / "c", ["bob_11_5_02_collectives.ipynb",
                                    "02_collectives_amy.ipynb"])
    assert name_students(items)[0] == "file name"
    assert {i.student for i in items} == {"bob_11_5_02_collectives",
                                         "02_collectives_amy"}


@pytest.mark.parametrize("names, words", [
    (["bob/02_collectives.ipynb", "bob_11_5_02_collectives.ipynb"],
     "beside the per-student folders"),
    (["g22 eve/02.ipynb", "g22_eve/02.ipynb"], "would share feedback"),
    (["Eve/02.ipynb", "eve/02.ipynb"], "would share feedback"),
    (["bob_11_5_02.ipynb", "bob_12_6_02.ipynb"], "two user ids")])
def test_a_collision_is_refused_in_one_line(tmp_path, names, words):
    with pytest.raises(BadInput, match=words) as e:
        name_students(folder(tmp_path, names))
    assert "\n" not in str(e.value)


def test_the_newest_file_is_graded_the_others_superseded(tmp_path):
    items = folder(tmp_path / "a", ["bob/02_a.ipynb", "bob/02_b.ipynb"],
                   times=[2_000_000_000, 1_000_000_000])
    name_students(items)
    assert newest(items).rel == "bob/02_a.ipynb"
    found = {i.rel: ("02_collectives", {}, "") for i in items}
    later = grade.superseded(items, found)
    assert list(later) == ["bob/02_b.ipynb"]
    assert "bob/02_a.ipynb is graded" in later["bob/02_b.ipynb"]
    canvas = folder(tmp_path / "b", ["bob_11_9_02.ipynb",
                                     "bob_11_10_02.ipynb"],
                    times=[2_000_000_000, 1_000_000_000])
    assert newest(canvas).rel == "bob_11_10_02.ipynb"   # submission id


def rows_of(student, file, lab, points, maxes, reason=""):
    return [dict(student=student, student_file=file, lab=lab, question=q,
                 points=p, max=m, reason=reason, isolation="x",
                 graded_at="t", autograder="c")
            for q, p, m in zip("abc", points, maxes)]


def test_the_gradebook_adds_up_and_feedback_is_fresh(tmp_path):
    out = tmp_path / "out"
    (out / "feedback").mkdir(parents=True)
    (out / "feedback" / "left_from_before.md").write_text("old")
    rows = (rows_of("bob", "bob/02_a.ipynb", "02_collectives", [3, 4],
                    [3, 4])
            + [dict(rows_of("bob", "bob/02_b.ipynb", "02_collectives", [0],
                            [None], "superseded: ...")[0],
                    question="superseded")]
            + rows_of("amy", "amy/02_a.ipynb", "02_collectives", [1],
                      [3], "<b>bold</b> **x** [l](http://h) | `c`"))
    report.write(out, rows, maxima={"02_collectives": 7.0})
    with (out / "gradebook.csv").open(newline="") as f:
        book = list(csv.reader(f))
    assert book[0][-1] == "02_collectives (max 7)"
    assert {r[0]: r[-1] for r in book[1:]} == {"amy": "1", "bob": "7"}
    assert sorted(p.name for p in (out / "feedback").iterdir()) == \
        ["amy.md", "bob.md"]
    assert "## 02_collectives: 7 / 7" in (out / "feedback" / "bob.md"
                                             ).read_text()
    amy = (out / "feedback" / "amy.md").read_text()
    assert "<b>" not in amy and "&lt;b&gt;" in amy
    assert "\\*\\*x\\*\\*" in amy and "\\[l\\]\\(http" in amy
    assert "\\| \\`c\\`" in amy
