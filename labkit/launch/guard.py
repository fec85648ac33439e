"""The guard: one small process per launch that ends the run with its owner.

    python -m labkit.launch.guard --owner PID -- python -m torch.distributed.run

`launch` does not start torchrun itself: it starts this guard (in a new
session), and the guard starts torchrun. Whatever kills the owner (the
process that called `launch`: SIGTERM, SIGINT, SIGHUP, SIGKILL, a Jupyter
kernel restart, ``scancel``), the run ends within seconds, by Linux
mechanisms rather than by handlers in the owner, which SIGKILL skips:

- ``PR_SET_PDEATHSIG``: the kernel signals the guard when the owner dies
  (when the owner's *thread* that started it ends: `launch` waits in that
  thread until the run is over). The guard also polls ``getppid()``.
- ``PR_SET_CHILD_SUBREAPER``: a rank whose torchrun died is re-parented to
  the guard, not to init, so the guard still sees every descendant, even
  ranks that left the process group (torchrun puts each in a session of
  its own).
- torchrun gets ``PR_SET_PDEATHSIG`` = SIGKILL, and each rank too
  (:mod:`labkit.launch.rank`): if the guard itself is SIGKILLed, torchrun
  dies, and its ranks with it.

On its owner's death, or on SIGTERM/SIGINT/SIGHUP (how `launch` stops a
run at its timeout), the guard sends SIGTERM to every descendant, SIGKILL
to what is left after ``--grace`` seconds, and exits. When torchrun exits
by itself the guard kills any straggler and exits with torchrun's status.
Only the standard library: it starts in a few tens of milliseconds.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
POLL_S = 0.1


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies."""
    if sys.platform.startswith("linux"):
        _prctl(PR_SET_PDEATHSIG, int(sig))


def descendants(pid: int | None = None) -> list[int]:
    """Every live descendant of ``pid`` (this process), from /proc."""
    parent_of = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # the name may hold spaces and parentheses: split after the last ')'
        fields = stat[stat.rindex(b")") + 2:].split()
        if fields[0] != b"Z":
            parent_of[int(d)] = int(fields[1])
    found, frontier = [], {os.getpid() if pid is None else pid}
    while frontier:
        frontier = {c for c, p in parent_of.items() if p in frontier}
        found += sorted(frontier)
    return found


class Guard:
    def __init__(self, owner: int, grace_s: float):
        self.owner, self.grace_s = owner, grace_s
        self.child = None
        self.status: int | None = None   # torchrun's exit status
        self.stop_signal: int | None = None

    def reap(self) -> None:
        """Collect every exited child: torchrun and adopted orphans."""
        while True:
            try:
                pid, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.child is not None and pid == self.child.pid:
                self.status = os.waitstatus_to_exitcode(st)

    def kill_tree(self, grace_s: float) -> None:
        """SIGTERM every descendant, SIGKILL what is left after grace_s."""
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            deadline = time.monotonic() + wait
            while True:
                self.reap()
                left = descendants()
                if not left:
                    return
                for pid in left:   # again each round: forks come late
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
                if time.monotonic() >= deadline:
                    break
                time.sleep(POLL_S / 2)

    def owner_alive(self) -> bool:
        return os.getppid() == self.owner

    def run(self, cmd: list[str]) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        die_with_parent(signal.SIGTERM)
        if not self.owner_alive():   # it died before the line above
            return 128 + signal.SIGTERM
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        self.child = subprocess.Popen(
            cmd, preexec_fn=lambda: die_with_parent(signal.SIGKILL))
        while True:
            self.reap()
            if self.stop_signal is not None or not self.owner_alive():
                self.kill_tree(self.grace_s)
                return 128 + (self.stop_signal or signal.SIGTERM)
            if self.status is not None:
                self.kill_tree(1.0)   # stragglers torchrun left behind
                return self.status if self.status >= 0 \
                    else 128 - self.status
            time.sleep(POLL_S)

    def _on_signal(self, sig, frame) -> None:
        self.stop_signal = sig


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--")
    p = argparse.ArgumentParser(prog="python -m labkit.launch.guard")
    p.add_argument("--owner", type=int, required=True)
    p.add_argument("--grace", type=float, default=1.5)
    a = p.parse_args(argv[:cut])
    return Guard(a.owner, a.grace).run(argv[cut + 1:])


if __name__ == "__main__":
    sys.exit(main())
