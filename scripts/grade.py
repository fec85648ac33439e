"""Grade a folder of handed-in assignment notebooks, each in its own jails.

    python scripts/grade.py SUBMISSIONS                 # every file in it
    python scripts/grade.py SUBMISSIONS --lab sharding  # all for one lab
    python scripts/grade.py SUBMISSIONS --only alice/03_sharding.ipynb
    python scripts/grade.py SUBMISSIONS --timeout 120 --jobs 2
    make grade SUBMISSIONS=path/to/folder [JOBS=2] [TIMEOUT=120] [LAB=...]

Needs the autograders of ``make assignments``
(``_build/assignments/autograder/NN_<lab>.zip``) and a sandbox:
``bubblewrap`` (``apt-get install bubblewrap``; ``make setup`` installs it
when root). Without one it refuses (exit 2) unless
``--unsafe-no-isolation`` (rlimits only: for your own notebooks).

Each notebook is matched to its lab by the assignment name ``otter
assign`` wrote into its metadata, or else by its file name
(``NN_<lab>...ipynb``); ``--lab`` pins the lab (a notebook of another lab
scores 0 with the reason). Symbolic links are refused, never followed.
Per submission (scripts/grading/, ``session.py``): the notebook runs in
one jail, the tests in a second that no student code ever runs in (its
result lines authenticated), each build-it rerun in a jail of its own; one
cgroup limits them together (memory, processes, CPU), nested under the
cgroup this runs in; writable space is size-limited tmpfs. Each rank of a
rerun shuts itself in a Landlock box (``rank_box.py``); on a kernel
without Landlock the ranks go unboxed and this says so in one line on
stderr, in the summary and in every row's ``isolation`` ("bubblewrap, no
rank box" where it is "bubblewrap, landlock 7" otherwise).

Writes, under ``--out`` (default ``_build/grades``): ``grades.csv`` (one
row per question: student, file, lab, question, points, max, reason,
isolation (the jail, the rank box), when, the autograder's commit), ``gradebook.csv`` (one row per
student, for Canvas or Gradescope, each lab's maximum the assignment's)
and ``feedback/<student>.md`` (the folder replaced each run); prints a
summary that names the isolation. Students are named from one source
for the whole folder (per-student folders, else Canvas's names, else
file names; ``grading/submissions.py``); a file beside per-student
folders or two ids that would share a feedback file are refused in one
line (exit 2); of a student's files for one lab the newest is graded,
the others are listed as superseded and add nothing. An earlier
grades.csv is kept under a time-stamped name; ``--only`` keeps every other student's rows. A
submission that crashes, hangs, tampers, is not a notebook or is for an
unknown lab gets its reason and the others are graded all the same; exit
status 2 (one line) only when nothing can be graded: a missing or empty
folder, no autograder, no sandbox, more jobs than the memory holds.
"""
from __future__ import annotations

import argparse
import datetime
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from assignments import MASTERS, OUT as ASSIGNMENTS, setup_cells  # noqa: E402
from grading import jail as jails, limits, rank_box, report  # noqa: E402
from grading.session import Grader, questions, tests_of  # noqa: E402,F401
from grading.submissions import (BadInput, collect, identify,  # noqa: E402
                                 name_students, newest, pin)
from run_labs import keep_previous  # noqa: E402

AUTOGRADERS = ASSIGNMENTS / "autograder"
OUT = ROOT / "_build" / "grades"


def course_copy(into: Path) -> list[str]:
    """A read-only copy of what grading needs: the course package, the lab
    profiles, the grading code. Returns the outside folders the jails also
    need read-only (the virtual environments it points to)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "labkit", into / "labkit", ignore=ignore)
    shutil.copytree(ROOT / "labs" / "profiles", into / "labs" / "profiles")
    shutil.copytree(ROOT / "scripts" / "grading", into / "grading",
                    ignore=ignore)
    for f in ("_config.yml", "requirements.txt"):
        if (ROOT / f).exists():
            shutil.copy2(ROOT / f, into / f)
    (into / "_build").mkdir()
    ro = []
    for name in (".venv-colossalai", ".cache"):
        if (ROOT / name).exists():
            real = (ROOT / name).resolve()
            (into / name).symlink_to(real)
            ro.append(str(real))
    for p in sorted(into.rglob("*"), reverse=True):
        if not p.is_symlink():
            p.chmod(p.stat().st_mode & ~0o222)
    into.chmod(0o555)
    return ro


def commit() -> str:
    r = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT,
                       capture_output=True, text=True)
    if r.returncode:
        return "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "labkit",
                            "scripts", "labs/assignments"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return r.stdout.strip() + ("+changes" if dirty else "")


def superseded(items, found) -> dict:
    """{file: reason} for each file a student handed in for a lab beside
    a newer one (``submissions.newest`` is graded; these add nothing)."""
    by: dict = {}
    for i in items:
        lab, nb, _ = found[i.rel]
        if nb is not None:
            by.setdefault((i.student, lab), []).append(i)
    out = {}
    for (_, lab), group in by.items():
        keep = newest(group)
        for i in group:
            if i is not keep:
                out[i.rel] = (f"superseded: {keep.rel} is graded for {lab} "
                              f"(the newest of this student's {len(group)} "
                              "files for it); this one adds nothing")
    return out


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("submissions", type=Path,
                    help="folder of handed-in notebooks")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds per notebook before it counts as a hang")
    ap.add_argument("--jobs", type=int, default=None,
                    help="submissions graded at once (default: what the "
                    f"memory holds at {limits.MEMORY >> 30} GiB each, at "
                    "most the cores)")
    ap.add_argument("--lab", help="grade every file as this assignment")
    ap.add_argument("--only", action="append", default=None,
                    help="regrade this file of the folder (repeatable); "
                    "the other rows of grades.csv stay")
    ap.add_argument("--out", type=Path, default=OUT,
                    help="folder for grades.csv (default _build/grades)")
    ap.add_argument("--unsafe-no-isolation", action="store_true",
                    help="grade without a sandbox (rlimits only): only for "
                    "notebooks you trust")
    return ap.parse_args(argv)


def check(a, labs):
    """(items, jail, pinned lab, jobs) or BadInput."""
    if str(a.submissions) in ("", "."):
        raise BadInput("say which folder: make grade SUBMISSIONS=<folder>")
    items = collect(a.submissions)
    name_students(items)        # one source for the whole folder
    if a.only:
        want = {str(Path(o)) for o in a.only}
        want |= {str(Path(o).relative_to(a.submissions)) for o in a.only
                 if Path(o).is_relative_to(a.submissions)}
        items = [i for i in items if i.rel in want]
        if not items:
            raise BadInput(f"--only {' '.join(a.only)}: no such file in "
                           f"{a.submissions}")
    if not labs:
        raise BadInput(f"no autograder in {AUTOGRADERS.relative_to(ROOT)}"
                       ": run `make assignments` first")
    pinned = pin(a.lab, labs)
    most = limits.jobs_that_fit(by_cores=False)
    jobs = a.jobs if a.jobs is not None else limits.jobs_that_fit()
    if jobs < 1 or jobs > most:
        raise BadInput(f"--jobs {jobs}: each submission may use "
                       f"{limits.MEMORY >> 30} GiB; this machine's memory "
                       f"holds {most} at once (give --jobs {most} or less)")
    jail = jails.choose(unsafe=a.unsafe_no_isolation)
    if jail is None:
        raise BadInput("no sandbox on this machine: install bubblewrap "
                       "(apt-get install bubblewrap, or make setup as "
                       "root) or pass --unsafe-no-isolation")
    return items, jail, pinned, jobs


def main(argv=None) -> int:
    a = parse(argv)
    labs = {p.stem for p in AUTOGRADERS.glob("*.zip")}
    try:
        items, jail, pinned, jobs = check(a, labs)
    except BadInput as e:
        print(f"grade: {report.clean(e)}", file=sys.stderr)
        return 2
    boxed, box_line = rank_box.describe(rank_box.abi())
    if boxed == "no rank box":      # one line, before anything runs
        print(f"grade: warning: {box_line}", file=sys.stderr)
    isolation = (f"{jail.describe()}; {box_line}; each rank in its own "
                 "user, network and IPC namespace, seccomp: no socket or "
                 "IPC of its own (rank_ns.py)")
    when = datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds")
    meta = {"isolation": f"{jail.name}, {boxed}", "graded_at": when,
            "autograder": commit()}
    t0 = time.perf_counter()
    course = Path(tempfile.mkdtemp(prefix="grade-course-"))
    try:
        grader = Grader(jail, course / "c", course_copy(course / "c"),
                        a.timeout, AUTOGRADERS, MASTERS, setup_cells)

        found = {i.rel: (pinned, None, i.refusal) if i.refusal
                 else identify(i.path, labs, pinned) for i in items}
        later = superseded(items, found)

        def one(item) -> list[dict]:
            lab, nb, note = found[item.rel]

            def row(q, points, most, reason):
                return dict(meta, student=item.student,
                            student_file=item.rel, lab=lab or "unknown",
                            question=q, points=points, max=most,
                            reason=reason)
            qs = questions(AUTOGRADERS / f"{lab}.zip") if lab else {}
            if item.rel in later:   # listed, never added up
                return [row("superseded", 0.0, None, later[item.rel])]
            if nb is None:
                return [row(q, 0.0, m, note) for q, m in qs.items()] or \
                    [row("all", 0.0, None, note)]
            try:
                got, problem = grader.grade(item.path, lab)
            except Exception as e:  # one bad submission never stops the rest
                got, problem = {}, f"grading error: {type(e).__name__}: {e}"
            rows = []
            for q, m in qs.items():
                p, _, reason = got.get(q, (0.0, m, problem or "not graded"))
                p = min(float(p), m)
                reason = "; ".join(x for x in (note, reason) if x)
                rows.append(row(q, p, m, reason[:300]))
            return rows

        with ThreadPoolExecutor(jobs) as pool:
            rows = [r for rs in pool.map(one, items) for r in rs]
    finally:
        for p in course.rglob("*"):
            if not p.is_symlink():
                p.chmod(p.stat().st_mode | stat.S_IWUSR)
        course.chmod(0o755)
        shutil.rmtree(course, ignore_errors=True)
    maxima = {lab: sum(questions(AUTOGRADERS / f"{lab}.zip").values())
              for lab in sorted({r["lab"] for r in rows} & labs)}
    csv_path, kept = report.write(
        a.out, rows, only={i.rel for i in items} if a.only else None,
        keep_previous=keep_previous, maxima=maxima)
    print(f"\nisolation: {isolation}\n")
    print("\n".join(report.summary(rows, [i.rel for i in items])))
    print(f"\n{len(items)} submissions in {time.perf_counter() - t0:.1f} s "
          f"at --jobs {jobs} -> {csv_path}"
          + (f" (earlier grades kept as {kept.name})" if kept else "")
          + f"; gradebook.csv, feedback/ beside it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
