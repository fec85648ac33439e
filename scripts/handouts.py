"""The student notebooks the book links, with or without ``make assignments``.

    python scripts/handouts.py DEST        # every master's, into DEST
    (scripts/build_book.py calls ``handouts``; tests/test_handouts.py)

Each lab page links its assignment as handed out (no solutions, no hidden
tests), never the master. ``handouts`` copies the one ``make assignments``
built (scripts/assignments.py: solutions checked) where it is newer than
its master, else makes it the same way without running the solutions
(``otter assign --no-run-tests --no-pdfs``: seconds, no real runs), with
the same checks for leaks and cells that do not compile.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from labkit.launch import checkout_pythonpath  # noqa: E402
from assignments import (OUT, discover, find_notebook, leaked,  # noqa: E402
                         uncompilable)


def _handouts(masters: dict[str, Path], dest: Path,
              timeout: float) -> list[Path]:
    """The student notebooks of ``masters`` in ``dest``, made by
    ``otter assign --no-run-tests --no-pdfs`` (one otter import for all:
    scripts/otter_once.py); what ``handout`` says."""
    from otter_once import assign_all
    env = dict(os.environ, PYTHONPATH=checkout_pythonpath())
    with tempfile.TemporaryDirectory(prefix="handout-") as tmp:
        items = [(n, m, Path(tmp) / n) for n, m in masters.items()]
        done, zlog = assign_all(items, 1, timeout, False, env)
        out = []
        for name, master, folder in items:
            student = folder / "out" / "student" / master.name
            if not student.exists():
                rc, seconds = done[name]
                f = folder / "otter.log"
                log = (f.read_text(errors="replace") if f.exists() else "") \
                    or zlog
                tail = log.strip().splitlines()[-1:] or ["no output"]
                why = (f"no result after {seconds:.0f} s: killed"
                       if rc is None else tail[0])
                raise SystemExit(f"assignments: no student notebook for "
                                 f"{name} (otter assign: {why[:200]})")
            bad = leaked(student) or uncompilable(student)
            if bad:
                raise SystemExit(f"assignments: the student notebook of "
                                 f"{name} is not fit to hand out: {bad[0]}")
            find_notebook(student, name)
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy2(student, dest / master.name)
            out.append(dest / master.name)
    return out


def handout(name: str, master: Path, dest: Path,
            timeout: float = 300.0) -> Path:
    """The student notebook of one master in ``dest`` (what the book's lab
    page links), made the way ``build`` makes it but without running the
    solutions (``otter assign --no-run-tests``: seconds, no real runs):
    ``make assignments`` is where the solutions are checked. The same
    checks for leaks and cells that do not compile; a failure is one
    line (SystemExit)."""
    return _handouts({name: master}, dest, timeout)[0]


def handouts(dest: Path, timeout: float = 600.0) -> list[Path]:
    """Every master's student notebook in ``dest``: the copy ``make
    assignments`` built (solutions checked) where it is newer than its
    master, else a fresh ``handout`` (all of those in one otter)."""
    masters, fresh = discover(), {}
    for name, master in masters.items():
        built = OUT / "student" / master.name
        try:    # OUT may be rebuilt meanwhile (make assignments beside a build)
            if built.stat().st_mtime >= master.stat().st_mtime \
                    and not leaked(built):
                dest.mkdir(parents=True, exist_ok=True)
                shutil.copy2(built, dest / master.name)
                continue
        except (OSError, ValueError):   # gone, or half written: make one
            pass
        fresh[name] = master
    if fresh:
        _handouts(fresh, dest, timeout)
    return [dest / m.name for m in masters.values()]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/handouts.py DEST")
    for path in handouts(Path(sys.argv[1])):
        print(path)
