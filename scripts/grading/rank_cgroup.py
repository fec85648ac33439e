"""Each rank of a rerun in a memory cgroup of its own, read by the hub.

    cg = RankCgroups.open(world)    # the rerun's process; None: no cgroup
    cg.enter(r)                     # rank r, first of all after its fork
    cg.read(r) -> dict              # the hub: what the kernel charged it
    cg.close()                      # every rank's cgroup removed

``/proc/PID/status`` (``memory.resident``) counts what is mapped into a
rank's process: a page the rank parked elsewhere (a tmpfs file, a memfd or
System V segment it unmapped, a pipe's buffer) is not there. The kernel
charges every page a process allocates to its memory cgroup, mapped or
not (``Documentation/admin-guide/cgroup-v1/memory.rst``): so each rank
joins a cgroup of its own (``rank-R`` beneath the rerun's, ``ENV``, which
the grader creates for the rerun's jail and binds into it: ``jail.py``)
before anything else runs, and the hub reads its ``memory.stat`` at every
reading: ``shmem`` (tmpfs and shared memory charged to the rank, wherever
it lies) and ``kernel`` (``memory.kmem.usage_in_bytes`` in v1: pipe and
socket buffers, kernel objects; 0 without that file). Page cache (the
files a rank reads) is left out: it is the course's and the system's,
not the rank's to stage.
The rank's anonymous memory is still read from ``/proc``: a forked rank
shares its parent's pages (torch, imported once) until it writes one,
and the cgroup is charged each page as Python's reference counts copy it,
a growth no tensor made (``anon`` in ``read``, for the record).

The ranks' cgroups lie inside the rerun's, which the grader removes with
everything in it when the rerun ends (``limits.Box.empty``), also on a
crash or a timeout; ``close`` removes them earlier, once the ranks ended.
Without ``ENV`` (a grader that is not root, cgroup v2's no-internal-process
rule, a kernel without the memory controller) ``open`` gives None and
the hub reads ``/proc`` alone, as ``grade.py`` says once in its summary.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

ENV = "GRADING_CGROUP"      # the rerun's memory cgroup, as its jail sees it


class RankCgroups:
    def __init__(self, dirs: list[Path], v2: bool):
        self.dirs, self.v2 = dirs, v2

    @classmethod
    def open(cls, world: int, root=None) -> "RankCgroups | None":
        """A memory cgroup per rank beneath ``root`` (default: ``ENV``'s);
        None when there is none or it cannot be written."""
        root = root or os.environ.get(ENV)
        if not root:
            return None
        root = Path(root)
        v2 = (root / "cgroup.controllers").exists()
        dirs: list[Path] = []
        try:
            for r in range(world):
                d = root / f"rank-{r}"
                d.mkdir()
                dirs.append(d)
            cg = cls(dirs, v2)
            for r in range(world):
                cg.read(r)             # the memory controller is there
        except (OSError, ValueError, KeyError):
            _remove(dirs)
            return None
        return cg

    def enter(self, r: int) -> None:
        """Move this process into rank ``r``'s cgroup (before it runs
        anything: what it allocates from here on is charged there)."""
        (self.dirs[r] / "cgroup.procs").write_text("0")

    def read(self, r: int) -> dict:
        """``{"shmem": B, "kernel": B, "anon": B}`` charged to rank ``r``
        now."""
        stat = {}
        for ln in (self.dirs[r] / "memory.stat").read_text().splitlines():
            k, _, v = ln.partition(" ")
            stat[k] = int(v)
        if self.v2:
            return {"shmem": stat["shmem"], "kernel": stat["kernel"],
                    "anon": stat["anon"]}
        kmem = self.dirs[r] / "memory.kmem.usage_in_bytes"
        return {"shmem": stat["shmem"], "anon": stat["rss"],
                "kernel": int(kmem.read_text()) if kmem.exists() else 0}

    def close(self) -> None:
        _remove(self.dirs)


def _remove(dirs: list[Path]) -> None:
    for d in dirs:
        for _ in range(20):
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:      # a rank not yet reaped: soon
                time.sleep(0.05)
