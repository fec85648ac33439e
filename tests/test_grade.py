"""scripts/grade.py as an instructor uses it: ONE `grade` run over a folder
of honest and hostile submissions (tests/hostile/, written to break the
grader), mostly of one cheap assignment (lab 2: formulas, no torchrun;
labs 3-6 launch build-it runs), with a short hang limit; then the inputs
where nothing can be graded. Only the lab-1 and lab-8 hostile cases need
real runs (a run record, a checkpoint folder).

nbval is not a grading check (it passes a blank student notebook): here
the grader grades each notebook, in its jail (scripts/grading/).
"""
import copy
import csv
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import assignments  # noqa: E402
import grade  # noqa: E402
from grading import jail, rank_box  # noqa: E402

LAB = "02_collectives"
HOSTILE = ROOT / "tests" / "hostile"
HANG_S = 100  # the run takes this long (the hang); above the slowest other
#             submission (lab 1's, whose grader launches a 2-rank run:
#             8 s idle, 15 s next to lab 8's beside 2 busy processes; 40 s
#             was too short beside the build-it reruns of labs 3 and 4 and
#             lab 4's key at --jobs 3 on 2 busy cores)
SANDBOX = jail.choose() is not None
needs_sandbox = pytest.mark.skipif(
    not SANDBOX, reason="no sandbox (apt-get install bubblewrap): hostile "
    "submissions are not run unboxed")


def header(path: Path) -> dict:
    """``# lab:``, ``# base:``, ``# expect:`` of a hostile cell."""
    return dict(re.findall(r"^# (lab|base|expect): (.*)$",
                           path.read_text(), re.M))


def hostile() -> dict[str, Path]:
    return {p.stem: p for p in sorted(HOSTILE.glob("*.py"))}


@pytest.fixture(scope="module")
def built():
    """Student notebooks, answer keys and autograders of the labs graded
    here (built by tests/test_assignments.py earlier in `make test`, else
    here)."""
    labs = {LAB, "04_zero"} | {header(p)["lab"] for p in hostile().values()}
    a, out = assignments.OUT, {}
    for lab in sorted(labs):
        paths = (a / "student" / f"{lab}.ipynb",
                 a / "solution" / f"{lab}.ipynb",
                 a / "autograder" / f"{lab}.zip")
        if not all(p.exists() for p in paths):
            assert assignments.main(["--only", lab.partition("_")[2]]) == 0
        out[lab] = {"student": json.loads(paths[0].read_text()),
                    "solution": json.loads(paths[1].read_text())}
    return out


def edit(nb, find: str, source: str):
    """A copy of ``nb`` whose (first) code cell containing ``find`` now
    reads ``source``."""
    nb = copy.deepcopy(nb)
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code"
                and find in "".join(c["source"]))
    cell["source"] = source
    return nb


def append(nb, source: str):
    nb = copy.deepcopy(nb)
    nb["cells"].append({"cell_type": "code", "metadata": {}, "outputs": [],
                        "execution_count": None, "source": source})
    return nb


HELPERS = """import collections, os, torch
shape = torch.Size([2, 3])
tally = collections.Counter("aab")
Point = collections.namedtuple("Point", "x y")
where = Point(1, 2)
disk = os.statvfs(".")
_t = t_2
del t_2
t_2 = mth.fsum([_t])
"""


def run_grade(folder: Path, out: Path, *extra) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"),
                           str(folder), "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=900)


def read(out: Path) -> dict:
    """{(student file, question): row}."""
    with (out / "grades.csv").open() as f:
        return {(r["student_file"], r["question"]): r for r in csv.DictReader(f)}


def of(rows: dict, student: str) -> dict:
    return {q: r for (f, q), r in rows.items() if f == student}


def tree_sum(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode() + p.read_bytes())
    return h.hexdigest()


def git_state() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--ignored=no"],
                          cwd=ROOT, capture_output=True, text=True).stdout + \
        subprocess.run(["git", "diff"], cwd=ROOT, capture_output=True,
                       text=True).stdout


def processes(marker: str, ours: bool = False) -> list[str]:
    """Command lines holding ``marker``; ``ours``: only those of this
    checkout's grader (its path or its venv's in the command line), so a
    second checkout grading on the same machine is not counted."""
    mine = (str(ROOT), sys.prefix)
    out = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmd and str(os.getpid()) != p.name and (
                not ours or any(m in cmd for m in mine)):
            out.append(cmd)
    return out


@pytest.fixture(scope="module")
def graded(built, tmp_path_factory):
    student, solution = built[LAB]["student"], built[LAB]["solution"]
    subs = tmp_path_factory.mktemp("submissions")
    out = tmp_path_factory.mktemp("grades")
    (out / "grades.csv").write_text("an earlier run\n")

    def put(name, nb):
        (subs / name).write_text(json.dumps(nb))

    put(f"{LAB}_solution.ipynb", solution)
    # honest, written its own way (issue 30, 9): an import added to the
    # first (otter) cell that an answer needs, helper globals of types
    # that subclass plain ones
    first = next(c for c in solution["cells"] if c["cell_type"] == "code")
    honest = edit(solution, "otter.Notebook(", "".join(first["source"])
                  .replace("import otter", "import otter, math as mth"))
    put(f"{LAB}_honest_helpers.ipynb", append(honest, HELPERS))
    # issue 30 (4, 5): a link to the answer key; a file name that is a
    # formula with terminal escapes
    key = assignments.OUT / "solution" / f"{LAB}.ipynb"
    (subs / f"{LAB}_link.ipynb").symlink_to(key)
    (subs / "linked_folder").symlink_to(key.parent)
    put(f'=HYPERLINK("x")\x1b[2J{LAB}.ipynb', student)
    # issue 30 (8): a lab-2 notebook handed in under lab 3's name (graded
    # as lab 2 from its metadata; with --lab 03_sharding, 0: below)
    put("03_sharding_is_lab2.ipynb", solution)
    put(f"{LAB}_blank.ipynb", student)
    put(f"{LAB}_one_wrong.ipynb",
        edit(solution, "t_2 =", "t_2 = 1.0\nt_8 = 2.0\n"))
    put(f"{LAB}_syntax.ipynb",
        edit(solution, "t_2 =", "t_2 = (4 *\n"))
    put(f"{LAB}_a_hang.ipynb", edit(solution, "t_2 =",
                                  "import time\ntime.sleep(100_000)\n"))
    put("alice.ipynb", solution)  # renamed: the lab comes from its metadata
    (subs / f"{LAB}_bob.ipynb").write_text("my answers: 41, 20\n")
    (subs / "homework.pdf").write_bytes(b"%PDF-1.4")
    (subs / f"{LAB}_v3.ipynb").write_text(json.dumps(
        {"nbformat": 3, "worksheets": [{"cells": []}], "metadata": {}}))
    (subs / "99_nothing.ipynb").write_text(json.dumps(
        {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    if SANDBOX:
        put("08_checkpoint_key.ipynb", built["08_checkpoint"]["solution"])
        # the key of a build-it part: full marks through its rerun's jail
        put("04_zero_key.ipynb", built["04_zero"]["solution"])
        for name, path in hostile().items():
            h = header(path)
            put(f"{h['lab']}_hostile_{name}.ipynb",
                append(built[h["lab"]][h["base"]], path.read_text()))
        put(f"{LAB}_z_blank_after_poison.ipynb", student)
    before = (git_state(), tree_sum(assignments.OUT))
    t0 = time.monotonic()
    r = run_grade(subs, out, "--timeout", str(HANG_S), "--jobs", "3",
                  *(() if SANDBOX else ("--unsafe-no-isolation",)))
    seconds = time.monotonic() - t0
    csv_after_run = (out / "grades.csv").read_bytes()
    # --only regrades one file and keeps the rest; --lab pins the lab
    only = run_grade(subs, out, "--only", str(subs / "03_sharding_is_lab2"
                                                     ".ipynb"),
                     "--lab", "sharding", "--timeout", str(HANG_S),
                     *(() if SANDBOX else ("--unsafe-no-isolation",)))
    time.sleep(6)  # a detached process would write within 4 s
    csv_after_only = (out / "grades.csv").read_bytes()
    return {"r": r, "out": out, "before": before, "seconds": seconds,
            "csv": csv_after_run, "only": only, "csv_only": csv_after_only,
            "after": (git_state(), tree_sum(assignments.OUT))}


def test_grade_run_goes_on(graded):
    r = graded["r"]
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"\d+ submissions in", r.stdout), r.stdout
    print(f"graded in {graded['seconds']:.0f} s:\n{r.stdout}")


def test_summary_and_csv_name_the_isolation(graded):
    assert "isolation: " in graded["r"].stdout
    rows = read(graded["out"])
    want = ("bubblewrap" if SANDBOX else "rlimits") + ", " + \
        rank_box.describe(rank_box.abi())[0]
    assert {r["isolation"] for r in rows.values()} == {want}
    assert rank_box.describe(rank_box.abi())[1] in graded["r"].stdout
    if SANDBOX:
        assert "namespaces" in graded["r"].stdout


def test_solution_full_marks(graded):
    rows = read(graded["out"])
    for q in ("q1_ring_bytes", "q2_crossover", "q3_busbw"):
        row = rows[f"{LAB}_solution.ipynb", q]
        assert float(row["points"]) == float(row["max"]) > 0, row
        assert row["lab"] == LAB and row["reason"] == ""


def test_blank_student_notebook_scores_zero(graded):
    for name in (f"{LAB}_blank.ipynb", f"{LAB}_z_blank_after_poison.ipynb"):
        blank = of(read(graded["out"]), name)
        if not SANDBOX and "poison" in name:
            continue
        assert len(blank) >= 3
        assert all(float(r["points"]) == 0 and r["reason"]
                   for r in blank.values()), blank


def test_one_wrong_answer_loses_that_question_only(graded):
    rows = of(read(graded["out"]), f"{LAB}_one_wrong.ipynb")
    got = {q: float(r["points"]) for q, r in rows.items()}
    assert got["q3_busbw"] == 0
    assert got["q1_ring_bytes"] == 2 and got["q2_crossover"] == 3
    assert rows["q3_busbw"]["reason"]


def test_broken_notebooks_have_a_reason(graded):
    rows = read(graded["out"])
    syntax = rows[f"{LAB}_syntax.ipynb", "q3_busbw"]
    assert float(syntax["points"]) == 0 and syntax["reason"]
    assert float(rows[f"{LAB}_syntax.ipynb", "q1_ring_bytes"]["points"]) == 2
    hang = of(rows, f"{LAB}_a_hang.ipynb").values()
    assert hang and all(float(r["points"]) == 0 and "hang" in r["reason"]
                        for r in hang)
    for name, why in ((f"{LAB}_bob.ipynb", "not a notebook"),
                      ("homework.pdf", "not a notebook"),
                      (f"{LAB}_v3.ipynb", "format 3"),
                      ("99_nothing.ipynb", "unknown lab")):
        mine = of(rows, name).values()
        assert mine and all(float(r["points"]) == 0 and why in r["reason"]
                            for r in mine), (name, mine)
    alice = of(rows, "alice.ipynb").values()
    assert alice and all(float(r["points"]) == float(r["max"])
                         and "metadata" in r["reason"] for r in alice)


def test_earlier_grades_kept(graded):
    kept = sorted(p.read_bytes() for p in graded["out"].glob("grades.csv.*"))
    # the first run kept the earlier file, --only kept the first run's
    assert sorted(kept) == sorted([b"an earlier run\n", graded["csv"]])


def test_no_score_above_its_max(graded):
    for row in read(graded["out"]).values():
        if row["max"]:
            assert 0 <= float(row["points"]) <= float(row["max"]), row


@needs_sandbox
@pytest.mark.parametrize("name", sorted(hostile()))
def test_hostile_submission_gets_only_honest_points(graded, name):
    h = header(hostile()[name])
    expect = h["expect"].split(" (")[0]
    honest = dict(kv.split("=") for kv in expect.split() if "=" in kv)
    rows = of(read(graded["out"]), f"{h['lab']}_hostile_{name}.ipynb")
    assert rows, name
    got = {q: float(r["points"]) for q, r in rows.items()}
    if expect == "full":
        honest = {q: r["max"] for q, r in rows.items()}
    assert got == {q: float(honest.get(q, 0)) for q in rows}, rows


@needs_sandbox
def test_tampering_is_named(graded):
    rows = of(read(graded["out"]), f"{LAB}_hostile_always_equal.ipynb")
    assert all(r["reason"].startswith("tampering: ") for r in rows.values())


@needs_sandbox
def test_shared_folder_gives_nothing(graded):
    rows = read(graded["out"])
    key = of(rows, "08_checkpoint_key.ipynb")
    assert all(float(r["points"]) == float(r["max"]) for r in key.values())
    key = of(rows, "04_zero_key.ipynb")
    assert key and all(float(r["points"]) == float(r["max"])
                       for r in key.values()), key
    assert rows["08_checkpoint_hostile_shared_folder_08.ipynb",
                "q3_on_disk"]["reason"]


@needs_sandbox
def test_checkout_and_keys_untouched(graded):
    assert graded["after"] == graded["before"]


@needs_sandbox
def test_no_process_left_and_grades_stay(graded):
    assert processes("hostile-detached-marker") == []
    assert processes("grading.runner", ours=True) == []
    assert processes("grading.evaluate", ours=True) == []
    assert (graded["out"] / "grades.csv").read_bytes() == \
        graded["csv_only"]
    assert b"forged" not in graded["csv"] + graded["csv_only"]


def test_reasons_never_quote_hidden_tests(graded):
    code = set()
    for lab in {r["lab"] for r in read(graded["out"]).values()}:
        if (grade.AUTOGRADERS / f"{lab}.zip").exists():
            for t in grade.tests_of(grade.AUTOGRADERS / f"{lab}.zip"):
                for s in t["suites"]:
                    for c in s["cases"]:
                        code |= {ln[4:].split(", '")[0].split(', "')[0]
                                 for ln in c["code"].splitlines()
                                 if len(ln) > 24}
    for row in read(graded["out"]).values():
        assert not any(c in row["reason"] for c in code), row


@pytest.mark.parametrize("case", ["missing", "empty"])
def test_nothing_to_grade_one_line_exit_2(case, built, tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "out"
    out.mkdir()
    (out / "grades.csv").write_text("earlier\n")
    if case != "missing":
        subs.mkdir()
    r = run_grade(subs, out)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("grade: "), r.stderr
    assert [p.name for p in out.iterdir()] == ["grades.csv"]
    assert (out / "grades.csv").read_text() == "earlier\n"


def test_no_sandbox_refuses_in_one_line(monkeypatch, tmp_path, capsys, built):
    (tmp_path / f"{LAB}.ipynb").write_text(json.dumps(built[LAB]["student"]))
    monkeypatch.setattr(grade.jails, "choose", lambda unsafe=False:
                        jail.Jail() if unsafe else None)
    assert grade.main([str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bubblewrap" in err[0]
    assert "--unsafe-no-isolation" in err[0]


def test_no_landlock_says_so_in_one_line(monkeypatch, tmp_path, capsys):
    """A kernel without Landlock (ABI 0): the ranks go unboxed, and grade
    says so once before it runs anything, in the summary and in the
    CSV's isolation field."""
    import zipfile
    subs, auto = tmp_path / "subs", tmp_path / "autograder"
    subs.mkdir()
    auto.mkdir()
    with zipfile.ZipFile(auto / f"{LAB}.zip", "w") as z:   # one question
        z.writestr("tests/q1.py", "test = {'name': 'q1', 'points': 1}\n")
    (subs / f"{LAB}_notes.txt").write_text("not a notebook")  # no jail
    monkeypatch.setattr(grade, "AUTOGRADERS", auto)
    monkeypatch.setattr(grade.rank_box, "abi", lambda: 0)
    monkeypatch.setattr(grade.jails, "choose",
                        lambda unsafe=False: jail.Jail())
    assert grade.main([str(subs), "--out", str(tmp_path / "o")]) == 0
    got = capsys.readouterr()
    err = [ln for ln in got.err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("grade: warning: no rank "
                                               "box"), got.err
    assert "Landlock" in err[0]
    summary = next(ln for ln in got.out.splitlines()
                   if ln.startswith("isolation: "))
    assert "no rank box" in summary
    rows = read(tmp_path / "o")
    assert {r["isolation"] for r in rows.values()} == {"rlimits, no rank box"}
    assert rank_box.describe(0)[0] == "no rank box"
    assert "TCP is not refused" in rank_box.describe(3)[1]
    assert "signals" in rank_box.describe(5)[1]
    assert rank_box.describe(7) == ("landlock 7", rank_box.describe(7)[1])
    assert ";" not in rank_box.describe(7)[1]


# -- issue 30 ---------------------------------------------------------------

def test_honest_helpers_and_first_cell_imports_full_marks(graded):
    rows = of(read(graded["out"]), f"{LAB}_honest_helpers.ipynb")
    assert rows and all(float(r["points"]) == float(r["max"]) > 0
                        and r["reason"] == "" for r in rows.values()), rows


def test_symlinks_refused_with_a_reason(graded):
    rows = read(graded["out"])
    for name in (f"{LAB}_link.ipynb", "linked_folder"):
        mine = of(rows, name).values()
        assert mine and all(float(r["points"]) == 0 and "symbolic link" in
                            r["reason"] for r in mine), (name, mine)


def test_no_formula_no_control_character_anywhere(graded):
    out = graded["out"]
    for name in ("grades.csv", "gradebook.csv"):
        with (out / name).open(newline="") as f:
            for row in csv.reader(f):
                for c in row:
                    assert not c.startswith(("=", "+", "-", "@", "\t",
                                             "\r")), (name, c)
                    assert not re.search("[\x00-\x1f\x7f-\x9f]", c), c
    assert "\x1b" not in graded["r"].stdout
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f]", graded["r"].stdout)
    evil = [r for r in read(out).values() if "HYPERLINK" in
            r["student_file"]]
    assert evil and all(r["student_file"].startswith("'=") for r in evil)


def test_pinned_lab_and_only_keep_the_class(graded):
    """--only regraded one file with --lab sharding: it is a lab-2
    notebook (0, with why); every other row of the class stayed."""
    r = graded["only"]
    assert r.returncode == 0, r.stdout + r.stderr
    before = list(csv.DictReader(graded["csv"].decode().splitlines()))
    after = list(csv.DictReader(graded["csv_only"].decode().splitlines()))
    mine = [x for x in after if x["student_file"] ==
            "03_sharding_is_lab2.ipynb"]
    assert mine and all(x["lab"] == "03_sharding" and float(x["points"]) == 0
                        and "02_collectives" in x["reason"] for x in mine)
    was = [x for x in before if x["student_file"] ==
           "03_sharding_is_lab2.ipynb"]
    assert was and all(x["lab"] == LAB for x in was)  # by its metadata
    rest = lambda rows: sorted(tuple(x.values()) for x in rows  # noqa: E731
                               if x["student_file"] !=
                               "03_sharding_is_lab2.ipynb")
    assert rest(after) == rest(before)


def test_gradebook_and_feedback_per_student(graded):
    out = graded["out"]
    rows = read(out)
    assert {r["graded_at"] for r in rows.values()} and all(
        r["autograder"] for r in rows.values())
    with (out / "gradebook.csv").open(newline="") as f:
        book = {r["Student"]: r for r in csv.DictReader(f)}
    col = next(k for k in next(iter(book.values())) if k.startswith(LAB))
    assert book[f"{LAB}_solution"][col] == "7"
    assert book[f"{LAB}_blank"][col] == "0"
    fb = (out / "feedback" / f"{LAB}_one_wrong.md").read_text()
    assert "q3_busbw" in fb and "book/02_collectives.md" in fb


def test_too_many_jobs_refused_in_one_line(built, tmp_path):
    (tmp_path / f"{LAB}.ipynb").write_text(json.dumps(built[LAB]["student"]))
    r = run_grade(tmp_path, tmp_path / "o", "--jobs", "999")
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--jobs" in lines[0], r.stderr


def test_canvas_names_and_folders_name_the_student():
    from grading.submissions import student_of
    assert student_of(Path("jdoe_12345_67890_03_sharding.ipynb")) == "jdoe"
    assert student_of(Path("jdoe_LATE_12345_67890_x.ipynb")) == "jdoe"
    assert student_of(Path("alice") / "03_sharding.ipynb") == "alice"
    assert student_of(Path("03_sharding_bob.ipynb")) == "03_sharding_bob"
