"""Measurement questions do not depend on load (issue 30, 6-7).

Assignment 7's questions used to be a timing race (which of three close
costs is the largest): the answer key scored 2 of 6 beside the student's
jail, a guess 5 of 7 in 7 runs of 10. Now they are graded on what the
grader's own traces *count* (the DataLoader iterator, collectives and
``aten::item`` per step), fixed by the configuration. Here ten copies of
the answer key are graded in ONE ``grade.py`` run at the default jobs,
beside two CPU-burning neighbours: all ten at full marks. A typed-in
guess and a constant function score 0 on both measurement questions.
"""
import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import assignments  # noqa: E402
from grading import jail  # noqa: E402

LAB = "07_profiling"
KEYS = 10
MEASURED = ("q1_faults", "q2_collectives")
GUESSES = {   # what a student types in without running anything
    "typed": ('faults_of = {"data"}\n', "collectives_per_step = 30\n"),
    "constant": ('def faults_of(r):\n    return {"data", "communication",'
                 ' "sync"}\n', "def collectives_per_step(c):\n"
                 "    return 30\n")}

# twelve lab-7 gradings (two launches each) beside two burners: long
# It is a load test (about 10 minutes of 2 cores by itself, and its
# burners would slow every test beside it): `make benchmark` runs it
# (scripts/benchmark.py, "load tests"), make test does not.
LOAD = os.environ.get("LABKIT_LOAD_TESTS") == "1"
pytestmark = [pytest.mark.distributed, pytest.mark.timeout(2400),
              pytest.mark.skipif(not LOAD, reason="a load test: run by "
                                 "`make benchmark` (or LABKIT_LOAD_TESTS=1)"),
              pytest.mark.skipif(jail.choose() is None, reason="no "
                                 "sandbox (apt-get install bubblewrap)")]


def answered(nb: dict, faults: str, counts: str) -> dict:
    nb = json.loads(json.dumps(nb))
    for c in nb["cells"]:
        src = "".join(c["source"])
        if src.startswith("def faults_of"):
            c["source"] = faults
        elif src.startswith("def collectives_per_step"):
            c["source"] = counts
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    a = assignments.OUT
    key = a / "solution" / f"{LAB}.ipynb"
    if not (key.exists() and (a / "autograder" / f"{LAB}.zip").exists()):
        assert assignments.main(["--only", "profiling"]) == 0
    nb = json.loads(key.read_text())
    subs = tmp_path_factory.mktemp("submissions")
    out = tmp_path_factory.mktemp("grades")
    for k in range(KEYS):
        (subs / f"{LAB}_key{k}.ipynb").write_text(json.dumps(nb))
    for name, (faults, counts) in GUESSES.items():
        (subs / f"{LAB}_{name}.ipynb").write_text(
            json.dumps(answered(nb, faults, counts)))
    burn = "while True: pass"
    burners = [subprocess.Popen([sys.executable, "-c", burn])
               for _ in range(2)]
    try:
        r = subprocess.run([sys.executable, str(ROOT / "scripts" /
                                                "grade.py"), str(subs),
                            "--out", str(out)], capture_output=True,
                           text=True, timeout=3000)
    finally:
        for b in burners:
            os.kill(b.pid, signal.SIGKILL)
            b.wait()
    assert r.returncode == 0, r.stdout + r.stderr
    with (out / "grades.csv").open() as f:
        rows = list(csv.DictReader(f))
    print(r.stdout)
    return rows


def test_answer_key_full_marks_ten_times_beside_two_burners(graded):
    keys = {}
    for row in graded:
        if "_key" in row["student_file"]:
            keys.setdefault(row["student_file"], []).append(row)
    assert len(keys) == KEYS
    lost = [f"{r['student_file']} {r['question']}: {r['reason']}"
            for rows in keys.values() for r in rows
            if float(r["points"]) != float(r["max"])]
    assert not lost, lost


@pytest.mark.parametrize("name", sorted(GUESSES))
def test_a_guess_scores_nothing_on_measurement_questions(graded, name):
    got = {r["question"]: float(r["points"]) for r in graded
           if r["student_file"] == f"{LAB}_{name}.ipynb"}
    assert set(MEASURED) <= set(got)
    assert all(got[q] == 0 for q in MEASURED), got
