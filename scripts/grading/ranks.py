"""A build-it rerun's ranks, forked from a process that imported torch once.

    ranks = fork_ranks("zero", source, config, world_size=2,
                       work=Path("ranks"), timeout=90.0, hub=True)

``labkit.buildit.run`` starts ranks with torchrun: an agent and N fresh
interpreters, each importing torch (about 1.7 s of CPU apiece, most of a
small part's rerun). A grader reruns every build-it submission, so here
the rerun's own process (``rerun.py``) imports torch and the rank side
(``labkit.runs.tools.buildit``) once and forks the N ranks: the same rank code,
real processes, without the N imports. torch is fork-safe while the parent
has run no op (no thread pool yet): the parent only imports.

With ``hub`` (every part whose harness has ``from_hub``), the ranks hold
no gloo group: each rank's default group is the hub's (``proxy.py``), over
a socket pair to this process, where the hub (``hub.py``) performs and
counts every collective; ``hub`` in the result is that count, which the
checks read instead of the ranks' own (``labkit.buildit.counted``). A
harness with ``share`` gets its data from the hub too, each rank its own
share, drawn from a ``data_seed`` chosen here after the forks (in the
result's ``data_seed`` and ``config``; ``labkit.buildit.dealt``).
Without it, the ranks join a real gloo group (``env://`` on the jail's
loopback).

Each child first closes every file it inherited but stdout and stderr
(which it points at its own log) and its hub socket (as fd 3): stdin and
the parent's pipe to the grader among them, so no rank can write a line
the grader would read as the rerun's result; it is not dumpable
(inherited), and the jail's seccomp filter forbids ptrace. On the hub,
each rank then shuts itself in a Landlock box (``rank_box.py``) before
any student code runs: it writes only in its own folder (``run/r<k>``,
its ``TMPDIR`` too), reads nothing of the other ranks', makes no TCP
connection and signals no other rank; its result is read from its own
folder only. Before the box, each rank takes namespaces of its own and a
seccomp filter (``rank_ns.py``): no System V or POSIX IPC, no socket of
its own (Unix, UDP or TCP), so the hub's socket is its only channel.
Last, still before the student's module, it marks "base": the hub reads
its memory then (``labkit.buildit.held``: no block held since, to free
between two of the hub's readings). Every reading of a rank counts what
its own folder holds too (``memory.folder_bytes``), the one place its box
lets it write; and where the grader gave the rerun a memory cgroup
(``rank_cgroup.py``), each rank joins one of its own first thing, so that
what it parks outside its process is charged to it and read by the hub.
"""
from __future__ import annotations

import functools
import json
import os
import signal
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path

from grading import memory, proxy, rank_box, rank_ns
from grading.hub import Hub
from grading.rank_cgroup import RankCgroups


def _child(rank: int, world: int, link, argv: list[str],
           run_dir: Path, timeout_s: float, cg=None) -> None:
    if cg is not None:
        try:                 # first: all it allocates is charged there
            cg.enter(rank)
        except OSError:      # its memory is read from /proc alone
            pass
    # everything inherited goes, the parent's channel to the grader first;
    # this rank's socket to the hub stays, as fd 3
    os.closerange(0, 1)
    if isinstance(link, socket.socket):
        os.dup2(link.fileno(), 3)
        os.closerange(4, os.sysconf("SC_OPEN_MAX"))
    else:
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    log = os.open(str(run_dir / f"rank-{rank}.log"),
                  os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      LABKIT_BACKEND="gloo", LABKIT_RUN_DIR=str(run_dir),
                      OMP_NUM_THREADS="1")
    if not isinstance(link, socket.socket):       # a gloo group: a port
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(link))
    code = 1
    try:
        if isinstance(link, socket.socket):
            memory.returned()      # the hub reads this rank's memory
            pg = proxy.init(socket.socket(fileno=3), rank, world, timeout_s)
            _mark_windows(pg)
            from labkit.buildit import dealt, points
            points.SEND = pg.point      # a harness's points, at the hub
            dealt.DEAL = pg.deal        # its data, from the hub
            # a box of its own: its folder, none of the other ranks'
            own = run_dir / f"r{rank}"
            os.environ.update(LABKIT_RUN_DIR=str(own),
                              TMPDIR=str(own / "tmp"),
                              HOME=str(own / "tmp"),
                              TORCHINDUCTOR_CACHE_DIR=str(own / "tmp"
                                                          / "inductor"))
            tempfile.tempdir = str(own / "tmp")   # read before the fork
            rank_ns.enter()       # no IPC, no socket: the hub's fd only
            rank_box.enter([own], read=[Path(argv[-1])],
                           shared=[run_dir.resolve().parent])
            pg.mark("base")       # the memory before any student code
        from labkit.runs.tools import buildit as rank_side
        sys.argv = ["labkit.runs.tools.buildit", *argv]
        rank_side.main()
        code = 0
    except BaseException:  # noqa: BLE001 - its log says why
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        os._exit(code)


def _mark_windows(pg) -> None:
    """Each ``CollectiveCounter`` window opens and closes at the hub too."""
    from labkit.measure.collectives import CollectiveCounter as C
    enter, leave = C.__enter__, C.__exit__

    def __enter__(self):
        pg.mark("open")
        return enter(self)

    def __exit__(self, *exc):
        try:
            return leave(self, *exc)
        finally:
            pg.mark("close")
    C.__enter__, C.__exit__ = __enter__, __exit__


def fork_ranks(lab: str, source: str, config: dict, world_size: int,
               work: Path, timeout: float, hub: bool = False,
               cgroup=None) -> dict:
    """The result ``labkit.buildit.run(lab, sources={"student": source},
    config=config)`` gives, from forked ranks; with ``hub``, their group
    is the hub's (``proxy.py``) and ``hub`` holds its counts, each rank in
    a memory cgroup of its own beneath ``cgroup`` (default: the one the
    grader gave the rerun, ``rank_cgroup.ENV``), where there is one."""
    cg = RankCgroups.open(world_size, cgroup) if hub else None
    try:
        return _fork_ranks(lab, source, config, world_size, work, timeout,
                           hub, cg)
    finally:
        if cg is not None:
            cg.close()


def _fork_ranks(lab, source, config, world_size, work, timeout, hub,
                cg) -> dict:
    import torch  # noqa: F401 - imported once, here, for every rank
    import torch.distributed  # noqa: F401
    # what an optimizer's constructor imports (some 800 modules: 1 s of
    # CPU and 67 MB a rank), here once; and so not in a rank's memory
    # between its reading before the student's code and the probe's
    import torch._dynamo  # noqa: F401
    from labkit import buildit
    from labkit.buildit import dealt
    from labkit.launch.rendezvous import free_port  # below ephemeral ports
    import labkit.runs.tools.buildit  # noqa: F401
    h = buildit.harness(lab)
    cfg = {**h.CONFIG, **(config or {})}
    work.mkdir(parents=True, exist_ok=True)
    code = work / "student.py"
    code.write_text(source)
    run_dir = work / "run"
    run_dir.mkdir(exist_ok=True)
    argv = ["--lab", lab, "--config", json.dumps(cfg), "--code", str(code)]
    pids, mine = {}, []
    rank_timeout = float(cfg.get("rank_timeout_s", 30))
    port = None if hub else free_port()
    for r in range(world_size):
        if hub:
            (run_dir / f"r{r}" / "tmp").mkdir(parents=True, exist_ok=True)
        here, there = socket.socketpair() if hub else (None, None)
        pid = os.fork()
        if pid == 0:
            _child(r, world_size, there or port, argv, run_dir,
                   rank_timeout, cg)
        if hub:
            there.close()
            mine.append(here)
        pids[pid] = r
    ends, deadline = {}, time.monotonic() + timeout

    def alive() -> bool:
        while len(ends) < len(pids):
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return True
            if pid in pids:
                ends[pids[pid]] = status
        return False
    order = sorted(pids, key=pids.get)        # the ranks' pids, in order
    deal = None
    if hub and hasattr(h, "share"):
        # drawn once the ranks are forked: no rank holds it, each gets
        # its share of the data from the hub (labkit.buildit.dealt)
        cfg = {**cfg, "data_seed": int.from_bytes(os.urandom(6), "big")}
        deal = functools.partial(dealt.flat_share, h.share, cfg, world_size)
    # each reading of a rank holds what its own folder holds too
    dirs = [run_dir / f"r{r}" for r in range(world_size)]
    counts = Hub(mine, timeout, pids=order, deal=deal, dirs=dirs,
                 cgroups=cg).serve(alive) if hub else None
    for s in mine:
        s.close()
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    hung = [r for p, r in pids.items() if r not in ends]
    for p, r in pids.items():
        if r in hung:
            os.kill(p, signal.SIGKILL)
            os.waitpid(p, 0)
    # each rank's result from its own folder (on the hub) only
    saved = [json.loads(f.read_text()) for f in (
        [run_dir / f"r{r}" / f"rank-{r}.json" for r in range(world_size)
         if (run_dir / f"r{r}" / f"rank-{r}.json").is_file()] if hub
        else sorted(run_dir.glob("rank-*.json")))]
    if hung or len(saved) < world_size:
        why = (f"rank {hung[0]} hung (killed after {timeout:.0f} s)" if hung
               else "a rank ended without its result ("
               + ", ".join(f"rank {r}: {_status(s)}"
                           for r, s in sorted(ends.items()) if s) + ")")
        err = "your code crashed or hung a rank: " + why
        saved += [{"results": {"student": {"error": err}}}]
    out = buildit.collect(lab, cfg, {"student": source}, saved)["student"]
    if hub:
        out["hub"] = counts
    if deal:
        out["data_seed"] = cfg["data_seed"]
    return out


def _status(s: int) -> str:
    if os.WIFSIGNALED(s):
        return signal.Signals(os.WTERMSIG(s)).name
    return f"exit {os.WEXITSTATUS(s)}"
