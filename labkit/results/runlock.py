"""One lab runner per checkout and profile at a time.

    with runlock.hold(out / profile, wait=False):   # RunnerBusy if held
        ...run the labs...

Two runners on one results folder destroy each other's runs: lab 8's
folders, the final sweep of a launch, the rename of a finished run. So a
runner takes ``<out>/.<profile>.runner.lock`` first (beside the
profile's folder, not in it: that folder holds only runs): an exclusive
``flock`` (the kernel drops it when the holder dies, even by SIGKILL, so a
stale lock never blocks) on a file that names the holder -- its pid, its
command line and when it started -- for the refusal's one line. A second
runner refuses (:class:`RunnerBusy`), or with ``wait=True`` waits for the
first to finish.

The book build takes the same kind of lock, ``kind="book"``
(``<out>/.html.book.lock`` for ``hold(out / "html", kind="book")``):
two builds in one checkout share ``_build/src`` and the jupyter-cache.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import sys
import time
from pathlib import Path

def lock_file(folder: str | Path, kind: str = "runner") -> Path:
    """``<out>/.<profile>.runner.lock`` for ``folder`` = ``<out>/<profile>``."""
    folder = Path(folder)
    return folder.parent / f".{folder.name}.{kind}.lock"


class RunnerBusy(RuntimeError):
    """Another runner holds this checkout's profile."""


def holder(folder: str | Path, kind: str = "runner") -> dict:
    """What the lock file says of its holder (``{}`` if nothing)."""
    try:
        return json.loads(lock_file(folder, kind).read_text() or "{}")
    except (OSError, ValueError):
        return {}


# a lock's kind -> what its holder is called, and what it does
KINDS = {"runner": ("runner", "running the labs in"),
         "book": ("book build", "building the book into")}


def _describe(info: dict, folder: Path, kind: str) -> str:
    noun, doing = KINDS.get(kind, (kind, "using"))
    if not info:
        return f"another {noun} holds {lock_file(folder, kind)}"
    return (f"another {noun} (pid {info.get('pid')}, started "
            f"{info.get('started')}: {info.get('command')}) is {doing} "
            f"{folder}")


@contextlib.contextmanager
def hold(folder: str | Path, wait: bool = False, poll_s: float = 0.5,
         say=None, kind: str = "runner"):
    """Hold the runner's lock on ``folder`` for the ``with`` block (the
    book build's with ``kind="book"``: ``folder`` is not made then)."""
    folder = Path(folder)
    (folder if kind == "runner" else folder.parent).mkdir(
        parents=True, exist_ok=True)
    fd = os.open(lock_file(folder, kind), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                text = _describe(holder(folder, kind), folder, kind)
                if not wait:
                    raise RunnerBusy(f"{text}; wait for it with --wait, "
                                     "or stop it") from None
                if not told and say:
                    say(f"{text}; waiting (--wait)")
                    told = True
                time.sleep(poll_s)
        info = {"pid": os.getpid(), "command": " ".join(sys.argv),
                "started": dt.datetime.now().isoformat(timespec="seconds")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        try:
            yield info
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
