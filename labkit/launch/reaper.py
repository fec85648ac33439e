"""Start a run under its guard, and end it: at its timeout, on an error,
or when the caller dies (the guard, :mod:`labkit.launch.guard`, does that).

The guard is started in a new session: a Ctrl-C in the caller's terminal
reaches the caller (``KeyboardInterrupt``, then :func:`stop`), not the run.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

GRACE_S = 1.5    # SIGTERM -> SIGKILL, in the guard


def start(cmd: list[str], log, env: dict) -> subprocess.Popen:
    """Start ``cmd`` (torchrun) under a guard that watches this process."""
    guard = [sys.executable, "-m", "labkit.launch.guard",
             "--owner", str(os.getpid()), "--grace", str(GRACE_S), "--", *cmd]
    return subprocess.Popen(guard, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env,
                            start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    """Ask the guard to end the run; force it if it does not in time."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=GRACE_S + 2.0)
        except subprocess.TimeoutExpired:
            pass
    _kill_group(proc, grace_s=0.0)


def _kill_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM the whole process group, then SIGKILL what is left.

    The group id is the pid of ``proc`` (started in a new session). The
    parent is reaped while waiting: an unreaped (zombie) parent still
    counts as a member of its group and would make the wait run its full
    length.
    """
    pgid = proc.pid
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            proc.poll()
            return
        deadline = time.monotonic() + wait
        while True:
            proc.poll()  # reap the parent as soon as it exits
            try:
                os.killpg(pgid, 0)  # anyone left in the group?
            except (ProcessLookupError, PermissionError):
                return
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
    proc.poll()


def _kill_orphans(run_dir: Path) -> None:
    """SIGKILL every process still carrying this run's LABKIT_RUN_DIR.

    The last sweep, after the guard: it finds a rank even if something
    took it out of the guard's tree.
    """
    import psutil
    for p in psutil.process_iter():
        try:
            if p.environ().get("LABKIT_RUN_DIR") == str(run_dir):
                p.kill()
        except (psutil.Error, OSError):
            continue
