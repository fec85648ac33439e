"""Each rank's heartbeat, and the launch's watch over them.

    heartbeat.start()                       # in each rank (launch.rank)
    heartbeat.stuck(run_dir, stall_s=30)    # in the launcher, each second
    # -> (rank, seconds since its last beat, "stopped (SIGSTOP?)") or None

A rank beats from a thread of its own: it touches
``<run_dir>/heartbeats/rank-<r>`` (which holds its pid) every second,
whatever its main thread does -- a collective, a matmul and a sleep all
release the GIL. A rank that stops beating while its process lives is
stuck: stopped (SIGSTOP, a debugger), in uninterruptible I/O, or holding
the GIL forever. The launch ends the run then and names that rank, within
``LABKIT_STALL_S`` seconds (default 30) of its last beat, instead of
waiting for gloo's own timeout (120 s) to blame a healthy peer. A rank
that finished or died is not stuck: its pid is gone.

The limit is per profile (:func:`profile_stall_s`; the runner sets
``LABKIT_STALL_S`` from it unless it is set): 30 s on the cpu profile;
300 s on a GPU profile, where one C call can hold the GIL far longer
than on gloo's tiny models -- NCCL's communicator set-up across 8 GPUs,
a Triton compile pass of lab 12's compile cell. 300 s is an allowance,
not a measurement; the launch's own timeout still bounds every run.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

BEAT_S = 1.0
STALL_S = 30.0
STATES = {"T": "stopped (SIGSTOP?)", "t": "stopped by a debugger",
          "D": "in uninterruptible disk or network I/O",
          "R": "running, but not beating (holding the GIL?)",
          "S": "sleeping, but not beating (holding the GIL?)"}


STALL_BY_PROFILE = {"cpu": STALL_S}
GPU_STALL_S = 300.0     # any other profile (see the module doc)


def profile_stall_s(profile: str) -> float:
    """The stall limit of a lab profile (cpu: 30 s, a GPU profile 300 s)."""
    return STALL_BY_PROFILE.get(profile, GPU_STALL_S)


def stall_s() -> float:
    try:
        return float(os.environ.get("LABKIT_STALL_S") or STALL_S)
    except ValueError:
        return STALL_S


def start(run_dir: str | None = None, rank: str | None = None):
    """Beat for this rank from a daemon thread (no-op outside a launch)."""
    run_dir = run_dir or os.environ.get("LABKIT_RUN_DIR")
    rank = rank if rank is not None else os.environ.get("RANK")
    if not run_dir or rank is None:
        return None
    folder = Path(run_dir) / "heartbeats"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"rank-{rank}"
    path.write_text(str(os.getpid()))

    def beat():
        while True:
            try:
                os.utime(path)
            except OSError:
                return
            time.sleep(BEAT_S)
    t = threading.Thread(target=beat, name="labkit-heartbeat", daemon=True)
    t.start()
    return t


def _state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    state = stat[stat.rindex(b")") + 2:].split()[0].decode()
    return None if state in ("Z", "X") else state


def stuck(run_dir: str | Path, limit_s: float | None = None):
    """The first rank that stopped beating while alive, else None."""
    limit_s = stall_s() if limit_s is None else limit_s
    now = time.time()
    for path in sorted(Path(run_dir, "heartbeats").glob("rank-*")):
        try:
            age = now - path.stat().st_mtime
            pid = int(path.read_text() or 0)
        except (OSError, ValueError):
            continue
        if age <= limit_s or not pid:
            continue
        state = _state(pid)
        if state is None:
            continue   # finished or died: torchrun reports that
        return (int(path.name.split("-")[1]), age,
                STATES.get(state, f"state {state}"), pid)
    return None
