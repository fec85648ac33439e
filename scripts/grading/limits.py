"""Limits of one submission as a whole: a cgroup that holds all its jails.

    box = Box.open("grade-123-4")      # None without writable cgroups
    box.cell("student")                # a child cgroup for one jail
    box.close()                        # every process in it killed

The submission's cgroup sits under the cgroup this process runs in (so a
limit put on ``make grade`` holds the jails too) wherever the controller
allows a child there, else at the controller's root. Its limits cover
every jail of the submission together (student notebook, the grader's
tests, each build-it rerun): memory (tmpfs pages written in a jail count
too), processes, CPU time. ``jobs_that_fit`` says how many submissions the
machine's memory holds at once.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

MEMORY = 6 << 30          # bytes per submission, all its jails together
PIDS = 768                # processes and threads per submission
CPUS = 2                  # cores per submission (CFS quota)
CGROUP = Path("/sys/fs/cgroup")
RESERVE = 2 << 30         # memory left to the grader and the system


def total_memory() -> int:
    for ln in Path("/proc/meminfo").read_text().splitlines():
        if ln.startswith("MemTotal:"):
            return int(ln.split()[1]) * 1024
    return 0


def jobs_that_fit(by_cores: bool = True) -> int:
    """Submissions at once that the machine's memory holds (at least 1);
    ``by_cores``: and at most the cores (but 2: one submission's start-up
    waits on imports while the other computes)."""
    by_mem = max(1, int((total_memory() - RESERVE) // MEMORY))
    return min(by_mem, max(2, os.cpu_count() or 1)) if by_cores else by_mem


def _own(controller: str) -> str:
    """This process's cgroup path for ``controller`` ('' = v2)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return "/"
    for ln in lines:
        _, names, path = ln.split(":", 2)
        if controller in names.split(",") or (controller == "" and
                                              names == ""):
            return path
    return "/"


def v2_limits() -> dict:
    return {"memory.max": MEMORY, "pids.max": PIDS,
            "cpu.max": f"{CPUS * 100000} 100000"}


def _layout() -> list[tuple[Path, Path, dict]]:
    """(parent folder, fallback root, limit files) per controller."""
    if (CGROUP / "cgroup.controllers").exists():                 # v2
        return [(CGROUP / _own("").lstrip("/"), CGROUP, v2_limits())]
    out = []
    for ctrl, limits in (
            ("memory", {"memory.limit_in_bytes": MEMORY}),
            ("pids", {"pids.max": PIDS}),
            ("cpu", {"cpu.cfs_period_us": 100000,
                     "cpu.cfs_quota_us": CPUS * 100000})):
        if (CGROUP / ctrl).is_dir():
            out.append((CGROUP / ctrl / _own(ctrl).lstrip("/"),
                        CGROUP / ctrl, limits))
    return out


def _enable(parent: Path, limits: dict) -> None:
    """v2: a child has ``memory.max`` (``pids.max``, ``cpu.max``) only when
    its parent hands it the controller (``cgroup.subtree_control``); a
    parent that holds processes itself cannot (the no-internal-process
    rule): the write fails and ``Box.open`` tries the root instead."""
    want = {f.partition(".")[0] for f in limits}
    if not (parent / "cgroup.subtree_control").exists() or not want:
        return
    have = set((parent / "cgroup.subtree_control").read_text().split())
    if want - have:
        (parent / "cgroup.subtree_control").write_text(
            " ".join(f"+{c}" for c in sorted(want - have)))


def _make(parent: Path, name: str, limits: dict) -> Path:
    _enable(parent, limits)
    d = parent / name
    d.mkdir()
    try:
        for f, v in limits.items():
            (d / f).write_text(str(v))
    except OSError:       # a limit that cannot be set: no box, not a
        d.rmdir()         # box without it
        raise
    return d


def _kill_and_remove(d: Path) -> None:
    for child in sorted(p for p in d.iterdir() if p.is_dir()):
        _kill_and_remove(child)
    for _ in range(50):
        try:
            pids = (d / "cgroup.procs").read_text().split()
        except OSError:
            return
        for p in pids:
            try:
                os.kill(int(p), signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            d.rmdir()
            return
        except OSError:
            time.sleep(0.1)


class Box:
    """The cgroups (one per controller) of one submission."""

    def __init__(self, dirs: list[Path], nested: bool):
        self.dirs, self.nested, self._n = dirs, nested, 0

    @classmethod
    def open(cls, name: str) -> "Box | None":
        dirs, nested = [], True
        try:
            for parent, root, limits in _layout():
                try:
                    dirs.append(_make(parent, name, limits))
                except OSError:   # v2's no-internal-process rule: the root
                    if parent == root:
                        raise
                    dirs.append(_make(root, name, limits))
                    nested = False
        except OSError:
            for d in dirs:
                _kill_and_remove(d)
            return None
        return cls(dirs, nested) if dirs else None

    def cell(self, what: str) -> list[Path]:
        """A child cgroup per controller for one jail (the box's limits
        hold all of them together)."""
        self._n += 1
        return [_make(d, f"{what}-{self._n}", {}) for d in self.dirs]

    @staticmethod
    def empty(cells: list[Path]) -> None:
        for d in cells:
            _kill_and_remove(d)

    def close(self) -> None:
        for d in self.dirs:
            _kill_and_remove(d)


def probe() -> bool:
    box = Box.open(f"grade-probe-{os.getpid()}")
    if box is None:
        return False
    box.close()
    return True
