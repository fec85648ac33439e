"""Grade a folder of handed-in assignment notebooks, each in its own jail.

    python scripts/grade.py SUBMISSIONS                 # every file in it
    python scripts/grade.py SUBMISSIONS --timeout 120   # seconds per notebook
    make grade SUBMISSIONS=path/to/folder

Needs the autograders of ``make assignments``
(``_build/assignments/autograder/NN_<lab>.zip``) and a sandbox:
``bubblewrap`` (``apt-get install bubblewrap``; ``make setup`` installs it
when root). Without one it refuses (exit 2) unless
``--unsafe-no-isolation`` (rlimits only: for your own notebooks).

Each notebook is matched to its lab by the assignment name ``otter
assign`` wrote into its metadata, or else by its file name
(``NN_<lab>...ipynb``). Then, per submission (scripts/grading/):

1. the notebook runs in a jail (``jail.py``) that sees a read-only copy of
   the course package and a private folder, nothing of the checkout, the
   answer keys, other submissions or the grades, and only loopback network;
   its answers come out as plain data (``runner.py``);
2. the tests run in a second jail that never ran student code
   (``evaluate.py``): the master's own setup cells, then the student's
   plain data; student functions are called across the wall;
3. both jails are killed with every process they started; the autograder's
   checksum is compared with the one taken before.

Writes ``_build/grades/grades.csv`` (student file, lab, question, points,
max, reason, isolation) and prints a summary that names the isolation. An
earlier grades.csv is kept under a time-stamped name, never overwritten.
A submission that crashes, hangs, tampers, is not a notebook, is of
nbformat 3 or is for an unknown lab gets its reason in the CSV and the
others are graded all the same; exit status 2 (one line) only when nothing
can be graded: a missing or empty folder, no autograder, no sandbox.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import select
import shutil
import stat
import sys
import tempfile
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from assignments import MASTERS, OUT as ASSIGNMENTS, setup_cells  # noqa: E402
from grading import jail as jails  # noqa: E402
from run_labs import keep_previous  # noqa: E402

AUTOGRADERS = ASSIGNMENTS / "autograder"
OUT = ROOT / "_build" / "grades"
FIELDS = ("student_file", "lab", "question", "points", "max", "reason",
          "isolation")
LINE_LIMIT = 64 << 20   # bytes of one message from a jail


class BadInput(Exception):
    """Nothing can be graded: one line, exit status 2."""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tests_of(autograder: Path) -> list[dict]:
    """The OK-format tests of an autograder, in question order."""
    out = []
    with zipfile.ZipFile(autograder) as z:
        for name in sorted(z.namelist()):
            if name.startswith("tests/") and name.endswith(".py"):
                scope: dict = {}
                exec(z.read(name).decode(), scope)  # our own test files
                out.append(scope["test"])
    return out


def questions(autograder: Path) -> dict[str, float]:
    """``{question: points}`` from the tests in an autograder."""
    return {t["name"]: float(t["points"]) for t in tests_of(autograder)}


def identify(path: Path, labs: set[str]) -> tuple[str | None, dict | None, str]:
    """(lab or None, notebook or None, note) for one handed-in file."""
    by_name = next((lab for lab in sorted(labs, key=len, reverse=True)
                    if path.stem.startswith(lab)), None)
    if path.suffix != ".ipynb":
        return by_name, None, ("not a notebook (.ipynb): hand in the "
                               "assignment notebook")
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(nb, dict) or "nbformat" not in nb:
            raise ValueError("no nbformat field")
    except (ValueError, UnicodeDecodeError) as e:
        return by_name, None, f"not a notebook ({str(e).splitlines()[0][:80]})"
    if nb.get("nbformat") != 4:
        return by_name, None, (f"a notebook of format {nb.get('nbformat')!r}"
                               ": save it as a Jupyter notebook (format 4)")
    meta = nb.get("metadata", {})
    meta = meta.get("otter", {}) if isinstance(meta, dict) else {}
    meta = meta.get("assignment_name") if isinstance(meta, dict) else None
    if meta in labs:
        note = "" if by_name == meta else (
            f"file name does not name the lab; graded as {meta} "
            "from its metadata")
        return meta, nb, note
    if by_name is None:
        return None, None, f"unknown lab (known: {', '.join(sorted(labs))})"
    return by_name, nb, ""


def collect(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise BadInput(f"no such folder: {folder}")
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not any(
        part.startswith(".") for part in p.relative_to(folder).parts))
    if not files:
        raise BadInput(f"{folder} holds no submission")
    return files


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


class Lines:
    """Lines from a jail's pipe, with a deadline and a size limit."""

    def __init__(self, f):
        self.fd, self.buf = f.fileno(), b""

    def readline(self, deadline: float) -> bytes | None:
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if not select.select([self.fd], [], [], left)[0]:
                continue
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                return None
            self.buf += chunk
            if len(self.buf) > LINE_LIMIT:
                raise ValueError("a message over 64 MiB")
        line, _, self.buf = self.buf.partition(b"\n")
        return line


class Grader:
    def __init__(self, jail, course: Path, ro: list[str], timeout: float):
        self.jail, self.course, self.timeout = jail, course, timeout
        self.python = str(Path(sys.prefix).resolve() / "bin" / "python")
        self.env = {"PATH": f"{Path(self.python).parent}:/usr/bin:/bin",
                    "LANG": "C.UTF-8", "MPLBACKEND": "Agg",
                    "PYDEVD_DISABLE_FILE_VALIDATION": "1",
                    "TORCH_EXTENSIONS_DIR": str(
                        Path(ro[-1] if ro else course) / "torch_extensions"),
                    "GRADING_RO": ":".join(ro)}
        self.tests, self.setup, self.sums = {}, {}, {}
        self.lock = threading.Lock()

    def lab(self, lab: str):
        with self.lock:
            return self._lab(lab)

    def _lab(self, lab: str):
        if lab not in self.tests:
            zip_ = AUTOGRADERS / f"{lab}.zip"
            self.sums[lab] = sha256(zip_)
            self.tests[lab] = tests_of(zip_)
            self.setup[lab] = setup_cells(MASTERS / f"{lab}.ipynb")
        return self.tests[lab], self.setup[lab]

    def grade(self, path: Path, lab: str) -> tuple[dict, str]:
        """``({question: (points, max, reason)}, problem)``: problem, when
        not empty, is the reason every question scores 0."""
        tests, setup = self.lab(lab)
        base = Path(tempfile.mkdtemp(prefix="grade-sub-"))
        procs = []
        try:
            work = base / "student"
            (work / "_build").mkdir(parents=True)
            shutil.copyfile(path, work / f"{lab}.ipynb")
            grader = base / "grader"
            (grader / "_build").mkdir(parents=True)
            (grader / "job.json").write_text(json.dumps(
                {"setup": setup, "tests": tests}))
            job_sum = sha256(grader / "job.json")
            t0 = time.monotonic()

            def evaluator():
                procs.append(self.jail.start(
                    [self.python, "-m", "grading.evaluate", "job.json"],
                    work=grader, course=self.course, env=self.env))
                return procs[-1]
            # the tests' setup runs meanwhile, unless it measures real runs
            # (lab 7's timings): then alone, after the notebook
            alone = any("launch(" in src for src in setup)
            ev = None if alone else evaluator()
            student = self.jail.start(
                [self.python, "-m", "grading.runner", f"{lab}.ipynb"],
                work=work, course=self.course, env=self.env)
            procs.append(student)
            s_out = Lines(student.stdout)
            try:
                line = s_out.readline(t0 + self.timeout)
            except TimeoutError:
                return {}, (f"hang: no result after {self.timeout:.0f} s "
                            "(killed)")
            except ValueError as e:
                return {}, f"the notebook's answers are too large ({e})"
            if line is None:
                rc = student.wait()
                return {}, (f"the notebook's process ended before its "
                            f"answers were read (exit {rc})")
            try:
                values = json.loads(line)["values"]
                assert type(values) is dict
            except (ValueError, KeyError, TypeError, AssertionError):
                return {}, "the notebook's answers could not be read"
            t1 = time.monotonic()
            ev = ev or evaluator()
            try:
                ev.stdin.write(json.dumps({"values": values}).encode()
                               + b"\n")
                ev.stdin.flush()
            except OSError:
                pass  # the evaluator ended: its setup error is read below
            e_out = Lines(ev.stdout)
            while True:
                try:
                    line = e_out.readline(t1 + self.timeout)
                except TimeoutError:
                    return {}, (f"hang: the tests got no result after "
                                f"{self.timeout:.0f} s (killed)")
                if line is None:
                    return {}, f"grader crashed (exit {ev.wait()})"
                msg = json.loads(line)
                if "call" not in msg:
                    break
                reply = b'{"error": "did not answer"}'
                try:
                    student.stdin.write(line + b"\n")
                    student.stdin.flush()
                    got = s_out.readline(t1 + self.timeout)
                    if got is not None:
                        reply = got
                except (TimeoutError, OSError, ValueError):
                    pass
                ev.stdin.write(reply + b"\n")
                ev.stdin.flush()
            if sha256(grader / "job.json") != job_sum:
                return {}, "tampering: the tests given to the grader changed"
        finally:
            for p in procs:
                self.jail.stop(p)
            shutil.rmtree(base, ignore_errors=True)
        if sha256(AUTOGRADERS / f"{lab}.zip") != self.sums[lab]:
            return {}, "tampering: the autograder's test files changed"
        if "setup_error" in msg:
            return {}, f"grader setup failed: {msg['setup_error']}"
        if msg.get("tampering"):
            return {}, "tampering: " + "; ".join(msg["tampering"])[:200]
        return {q: (r["points"], r["max"], "; ".join(r["reasons"]))
                for q, r in msg["questions"].items()}, ""


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
    ap.add_argument("--unsafe-no-isolation", action="store_true",
                    help="grade without a sandbox (rlimits only): only for "
                    "notebooks you trust")
    a = ap.parse_args(argv)
    labs = {p.stem for p in AUTOGRADERS.glob("*.zip")}
    folder = a.submissions
    try:
        if str(folder) in ("", "."):
            raise BadInput("say which folder: make grade SUBMISSIONS=<folder>")
        files = collect(folder)
        if not labs:
            raise BadInput(f"no autograder in {AUTOGRADERS.relative_to(ROOT)}"
                           ": run `make assignments` first")
        jail = jails.choose(unsafe=a.unsafe_no_isolation)
        if jail is None:
            raise BadInput("no sandbox on this machine: install bubblewrap "
                           "(apt-get install bubblewrap, or make setup as "
                           "root) or pass --unsafe-no-isolation")
    except BadInput as e:
        print(f"grade: {e}", file=sys.stderr)
        return 2
    isolation = jail.describe()
    t0 = time.perf_counter()
    course = Path(tempfile.mkdtemp(prefix="grade-course-"))
    try:
        grader = Grader(jail, course / "c", course_copy(course / "c"),
                        a.timeout)

        def one(path: Path) -> list[dict]:
            student = str(path.relative_to(folder))
            lab, nb, note = identify(path, labs)

            def row(q, points, most, reason):
                return dict(student_file=student, lab=lab or "unknown",
                            question=q, points=points, max=most,
                            reason=reason, isolation=jail.name)
            qs = questions(AUTOGRADERS / f"{lab}.zip") if lab else {}
            if nb is None:
                return [row(q, 0.0, m, note) for q, m in qs.items()] or \
                    [row("all", 0.0, None, note)]
            try:
                got, problem = grader.grade(path, lab)
            except Exception as e:  # one bad submission never stops the rest
                got, problem = {}, f"grading error: {type(e).__name__}: {e}"
            rows = []
            for q, m in qs.items():
                p, _, reason = got.get(q, (0.0, m, problem or "not graded"))
                p = min(float(p), m)
                reason = "; ".join(x for x in (note, reason) if x)
                rows.append(row(q, p, m, reason[:300]))
            return rows

        with ThreadPoolExecutor(max(1, a.jobs)) as pool:
            rows = [r for rs in pool.map(one, files) for r in rs]
    finally:
        for p in course.rglob("*"):
            if not p.is_symlink():
                p.chmod(p.stat().st_mode | stat.S_IWUSR)
        course.chmod(0o755)
        shutil.rmtree(course, ignore_errors=True)
    a.out.mkdir(parents=True, exist_ok=True)
    csv_path = a.out / "grades.csv"
    kept = keep_previous(csv_path)
    with csv_path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"\nisolation: {isolation}")
    print(f"\n{'student file':36s} {'lab':22s} {'points':>7s} {'max':>5s}  "
          "notes")
    for path in files:
        student = str(path.relative_to(folder))
        mine = [r for r in rows if r["student_file"] == student]
        got = sum(r["points"] for r in mine)
        most = sum(r["max"] or 0 for r in mine)
        notes = sorted({r["reason"] for r in mine if r["reason"]})
        print(f"{student:36s} {mine[0]['lab']:22s} {got:7.1f} {most:5.0f}  "
              + " | ".join(notes)[:160])
    print(f"\n{len(files)} submissions in {time.perf_counter() - t0:.1f} s "
          f"-> {csv_path}" + (f" (earlier grades kept as {kept.name})"
                              if kept else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
