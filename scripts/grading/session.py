"""Grading one submission: its jails, their pipes, the authenticated result.

    g = Grader(jail, course, ro, timeout)
    got, problem = g.grade(path, lab)  # {question: (points, max, reason)}

Per submission, one cgroup (``limits.Box``) holds every jail it gets:

1. the student's notebook (``runner.py``), untrusted;
2. the grader's tests (``evaluate.py``), trusted: PID 1 of its jail, no
   student code ever runs there; its first stdin line is a fresh secret
   and every line it writes is authenticated with it (``channel.py``);
3. one jail per build-it rerun that a hidden test asks for
   (``rerun.py``): the student's source on real ranks, alone.

Student functions are called across the wall (plain data both ways);
rerun results go to the evaluator as plain data, which checks them
against references it computes itself. Every jail is killed, with all it
started, when the submission is done.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

from grading.channel import new_secret, verify
from grading.pipe import Lines

RERUN_S = 240.0   # seconds for one build-it rerun (ranks + start-up)


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


def quiet(proc, stop: bool) -> None:
    """Stop (SIGSTOP) or resume every process of a jail's cgroup, so that a
    measurement the grader takes (lab 7's timings) runs with no student
    process beside it. Without cgroups: nothing (the grader still measures
    after the notebook has run)."""
    import signal
    cells = getattr(proc, "cgroups", [])
    if not cells:
        return
    try:
        pids = (cells[0] / "cgroup.procs").read_text().split()
    except OSError:
        return
    for p in pids:
        try:
            os.kill(int(p), signal.SIGSTOP if stop else signal.SIGCONT)
        except (ProcessLookupError, ValueError):
            pass


class Grader:
    def __init__(self, jail, course: Path, ro: list[str], timeout: float,
                 autograders: Path, masters: Path, setup_cells):
        self.jail, self.course, self.timeout = jail, course, timeout
        self.autograders, self.masters = autograders, masters
        self.setup_cells = setup_cells
        self.python = str(Path(sys.prefix).resolve() / "bin" / "python")
        self.env = {"PATH": f"{Path(self.python).parent}:/usr/bin:/bin",
                    "LANG": "C.UTF-8", "MPLBACKEND": "Agg",
                    "PYDEVD_DISABLE_FILE_VALIDATION": "1",
                    "TORCH_EXTENSIONS_DIR": str(
                        Path(ro[-1] if ro else course) / "torch_extensions"),
                    "GRADING_RO": ":".join(ro)}
        self.tests, self.setup, self.sums = {}, {}, {}
        self.lock = threading.Lock()
        self._n = 0

    def lab(self, lab: str):
        with self.lock:
            if lab not in self.tests:
                zip_ = self.autograders / f"{lab}.zip"
                self.sums[lab] = sha256(zip_)
                self.tests[lab] = tests_of(zip_)
                self.setup[lab] = self.setup_cells(
                    self.masters / f"{lab}.ipynb")
            self._n += 1
            return self.tests[lab], self.setup[lab], self._n

    def grade(self, path: Path, lab: str) -> tuple[dict, str]:
        """``({question: (points, max, reason)}, problem)``: problem, when
        not empty, is the reason every question scores 0."""
        tests, setup, n = self.lab(lab)
        base = Path(tempfile.mkdtemp(prefix="grade-sub-"))
        box = self.jail.box(f"grade-{os.getpid()}-{n}")
        s = _Submission(self, base, box, lab)
        try:
            got = s.run(path, tests, setup)
        finally:
            s.close()
            if box is not None:
                box.close()
            shutil.rmtree(base, ignore_errors=True)
        if sha256(self.autograders / f"{lab}.zip") != self.sums[lab]:
            return {}, "tampering: the autograder's test files changed"
        return got


class _Submission:
    def __init__(self, g: Grader, base: Path, box, lab: str):
        self.g, self.base, self.box, self.lab = g, base, box, lab
        self.procs: list = []
        self.secret = new_secret()
        self.reruns = 0

    def start(self, module: str, arg: list, work: Path, trusted: bool,
              what: str):
        # the student's build-it runs are deferred: the grader reruns
        # the source in a jail of its own (labkit.buildit.DEFER)
        env = self.g.env if trusted else dict(self.g.env,
                                              LABKIT_BUILDIT_DEFER="1")
        p = self.g.jail.start([self.g.python, "-m", module, *arg],
                              work=work, course=self.g.course,
                              env=env, box=self.box, trusted=trusted,
                              what=what)
        self.procs.append(p)
        return p

    def close(self):
        for p in self.procs:
            self.g.jail.stop(p)

    def evaluator(self, grader_dir: Path):
        ev = self.start("grading.evaluate", ["job.json"], grader_dir, True,
                        "grader")
        ev.stdin.write(json.dumps({"secret": self.secret}).encode() + b"\n")
        ev.stdin.flush()
        return ev

    def rerun(self, msg: dict, deadline: float) -> bytes:
        """One build-it rerun in a jail of its own; its plain result."""
        self.reruns += 1
        work = self.base / f"rerun-{self.reruns}"
        work.mkdir()
        p = self.start("grading.rerun", [], work, True, "rerun")
        try:
            p.stdin.write(json.dumps({"lab": msg.get("rerun"),
                                      "source": msg.get("source")}).encode()
                          + b"\n")
            p.stdin.flush()
            line = Lines(p.stdout).readline(
                min(deadline, time.monotonic() + RERUN_S))
        except TimeoutError:
            return b'{"error": "the rerun of your code hung (killed)"}'
        except (OSError, ValueError):
            line = None
        finally:
            self.g.jail.stop(p)
            self.procs.remove(p)
        return line or b'{"error": "the rerun of your code crashed"}'

    def run(self, path: Path, tests, setup) -> tuple[dict, str]:
        timeout = self.g.timeout
        work = self.base / "student"
        work.mkdir()
        shutil.copyfile(path, work / f"{self.lab}.ipynb")
        grader = self.base / "grader"
        grader.mkdir()
        (grader / "job.json").write_text(json.dumps(
            {"setup": setup, "tests": tests}))
        job_sum = sha256(grader / "job.json")
        t0 = time.monotonic()
        # the tests' setup runs meanwhile, unless it measures real runs
        # (lab 7's timings): then alone, after the notebook is done
        alone = any("launch(" in src for src in setup)
        ev = None if alone else self.evaluator(grader)
        student = self.start("grading.runner", [f"{self.lab}.ipynb"], work,
                             False, "student")
        s_out = Lines(student.stdout)
        reading = None            # the value the runner said it reads
        while True:
            try:
                line = s_out.readline(t0 + timeout)
            except TimeoutError:
                return {}, f"hang: no result after {timeout:.0f} s (killed)"
            except ValueError as e:
                return {}, f"the notebook's answers are too large ({e})"
            if line is None:
                rc = student.wait()
                at = (f" while reading `{reading}`, a value the grader "
                      "could not read" if reading else "")
                return {}, (f"the notebook's process ended before its "
                            f"answers were read{at} (exit {rc})")
            said = _said(line)
            if said is None:
                break
            reading = said
        try:
            values = json.loads(line)["values"]
            assert type(values) is dict
        except (ValueError, KeyError, TypeError, AssertionError):
            return {}, "the notebook's answers could not be read"
        t1 = time.monotonic()
        if alone:   # measured runs: the student's jail sleeps meanwhile
            quiet(student, True)
        ev = ev or self.evaluator(grader)
        try:
            ev.stdin.write(json.dumps({"values": values}).encode() + b"\n")
            ev.stdin.flush()
        except OSError:
            pass  # the evaluator ended: its setup error is read below
        e_out = Lines(ev.stdout)
        while True:
            try:
                line = e_out.readline(t1 + timeout)
            except TimeoutError:
                return {}, (f"hang: the tests got no result after "
                            f"{timeout:.0f} s (killed)")
            except ValueError:
                return {}, "grader crashed (a message too large)"
            if line is None:
                return {}, f"grader crashed (exit {ev.wait()})"
            msg = verify(self.secret, line)
            if type(msg) is not dict:
                return {}, ("tampering: a line on the grader's channel "
                            "that the grader did not write")
            if "rerun" in msg:
                reply = self.rerun(msg, t1 + timeout)
            elif "call" in msg:
                quiet(student, False)
                reply = self.call(student, s_out, line.partition(b" ")[2],
                                  t1 + timeout)
                if alone:
                    quiet(student, True)
            else:
                break
            try:
                ev.stdin.write(reply + b"\n")
                ev.stdin.flush()
            except OSError:
                pass
        if sha256(grader / "job.json") != job_sum:
            return {}, "tampering: the tests given to the grader changed"
        if "setup_error" in msg:
            return {}, f"grader setup failed: {msg['setup_error']}"
        if msg.get("tampering"):
            return {}, "tampering: " + "; ".join(msg["tampering"])[:200]
        return {q: (r["points"], r["max"], "; ".join(r["reasons"]))
                for q, r in msg["questions"].items()}, ""

    @staticmethod
    def call(student, s_out, request: bytes, deadline: float) -> bytes:
        try:
            student.stdin.write(request + b"\n")
            student.stdin.flush()
            got = s_out.readline(deadline)
            if got is not None:
                return got
        except (TimeoutError, OSError, ValueError):
            pass
        return b'{"error": "did not answer"}'


def _said(line: bytes) -> str | None:
    """The name in a runner's ``{"reading": name}`` line, else None."""
    if not line.startswith(b'{"reading": '):
        return None
    try:
        name = json.loads(line)["reading"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    return str(name)[:60]
