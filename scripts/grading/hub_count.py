"""The hub's count of each rank: its windows, its points, its memory.

    count = Count(n, pids)                # in the hub (hub.py)
    count.call(r, "all_gather", nbytes, "float32")
    count.mark(r, "open" | "close" | "point", name)
    count.record()                        # what the hub returns

``windows``: the calls of each counting window the rank's harness
opened, in order, as ``[op, bytes, dtype]`` per call, and for a send or
a receive the peer and the message's last two values, ``[op, bytes,
dtype, peer, tail]`` (``bytes`` as ``labkit.measure.collectives``
defines them: the gathered output of an all-gather, the input of a
reduce-scatter or an all-to-all); ``outside``: what it did outside any
window, barriers aside. With the ranks' ``pids``, ``rss``: per rank, the
anonymous memory the rank's process held as it opened each window
(``memory.resident``, read here while the rank waits for the hub's
answer to its mark): what a part's memory checks read instead of a
number the rank computes about itself (``labkit.buildit.zero``);
``call_rss``: per rank and window, its memory at each call of that
window, read as the hub performs it (the rank waits for its answer: a
reading it cannot time otherwise than by the call itself); and
``base``, per rank, its memory at the first "base" mark, which the
course's code sends before the student's module is imported
(``ranks.py``), so that a block held since then shows
(``labkit.buildit.held``).
``points``: per rank, each point its harness marked
(``labkit.buildit.points``) as ``[name, windows opened, calls of the
open window before it (-1 outside one), memory then (-1 unread)]``,
where a check reads an order or a memory peak instead of the rank's own
timeline or probe (``labkit.buildit.sharding``'s overlap,
``labkit.buildit.fsdp_peak``); a scaled point (``points.scaled``) has
the weights the hub answered with (one per row) as a fifth value.
With the ranks' own folders (``dirs``), every reading of a rank's memory
adds what its folder holds (``memory.folder_bytes``: a file parked there
during backward is held all the same), and ``folder``: per rank, that
part of its reading as each window opened. With a memory cgroup per rank
(``rank_cgroup.py``), a reading is the rank's anonymous memory, the
larger of the shared memory it maps (and its folder) and the shared
memory charged to its cgroup (what it parked anywhere), and the kernel
memory charged to it (buffers it filled); ``cgroup``: per rank, the
cgroup's ``[shmem, kernel, anon]`` as each window opened (-1: unread).
``sumsq``: per rank and window, the sum of squares of the all-reduces'
results the hub computed (what a check finds a hub's weights in,
``labkit.buildit.sharding``).
"""
from __future__ import annotations

from grading.memory import folder_bytes, parts
from labkit.buildit.points import NAME_CHARS  # a point's name: kept chars

# the points a rank may mark (``labkit.buildit.points``); more are dropped
MAX_POINTS = 4096


class Count:
    def __init__(self, n: int, pids=None, dirs=None, cgroups=None):
        self.pids, self.dirs, self.cgroups = pids, dirs, cgroups
        self.folder = [[] for _ in range(n)]
        self.charged = [[] for _ in range(n)]
        self.windows = [[] for _ in range(n)]
        self.outside = [{} for _ in range(n)]
        self.depth = [0] * n
        self.points = [[] for _ in range(n)]
        self.rss = [[] for _ in range(n)]
        self.base = [-1] * n
        self.sumsq = [[] for _ in range(n)]
        self.call_rss = [[] for _ in range(n)]

    def call(self, r: int, op: str, nbytes: int, dtype: str,
             *p2p, sumsq: float = 0.0) -> None:
        if self.depth[r] > 0:
            self.sumsq[r][-1] += sumsq
            self.windows[r][-1].append([op, nbytes, dtype, *p2p])
            if self.pids:
                self.call_rss[r][-1].append(self._memory(r))
        elif op != "barrier":
            self.outside[r][op] = self.outside[r].get(op, 0) + nbytes

    def _memory(self, r: int, opening: bool = False) -> int:
        if not self.pids:
            return -1
        anon, shmem = parts(self.pids[r])
        held = folder_bytes(self.dirs[r]) if self.dirs and anon >= 0 else 0
        if opening and self.dirs:
            self.folder[r].append(held if anon >= 0 else -1)
        if anon < 0:
            return -1
        c = None
        if self.cgroups:
            try:
                c = self.cgroups.read(r)
            except (OSError, ValueError, KeyError):
                pass             # gone: /proc alone, as without one
            if opening:
                self.charged[r].append([c["shmem"], c["kernel"], c["anon"]]
                                       if c else [-1, -1, -1])
        if c is None:
            return anon + shmem + held
        return anon + max(shmem + held, c["shmem"]) + c["kernel"]

    def mark(self, r: int, kind, name=None, scale=None) -> None:
        if kind == "point":
            if len(self.points[r]) < MAX_POINTS:
                calls = len(self.windows[r][-1]) if self.depth[r] else -1
                self.points[r].append([str(name)[:NAME_CHARS],
                                       len(self.windows[r]), calls,
                                       self._memory(r)]
                                      + ([scale] if scale else []))
        elif kind == "open":
            if self.depth[r] == 0:
                self.windows[r].append([])
                self.sumsq[r].append(0.0)
                if self.pids:
                    self.rss[r].append(self._memory(r, opening=True))
                    self.call_rss[r].append([])
            self.depth[r] += 1
        elif kind == "base" and self.base[r] < 0:
            self.base[r] = self._memory(r)   # the first only: the course's
        elif kind == "close" and self.depth[r] > 0:
            self.depth[r] -= 1

    def record(self) -> dict:
        out = {"windows": self.windows, "outside": self.outside,
               "points": self.points, "sumsq": self.sumsq}
        if self.pids:
            out["rss"], out["base"] = self.rss, self.base
            out["call_rss"] = self.call_rss
            if self.dirs:
                out["folder"] = self.folder
            if self.cgroups:
                out["cgroup"] = self.charged
        return out
