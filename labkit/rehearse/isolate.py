"""One rehearsed rank in a forked child: a crash of torch's code under fake
tensors ends the child, not the process that rehearses.

    r = rank_apart(main, world_size, rank, argv, run_dir)   # a RankResult
    r.error, r.peak, r.record, r.p2p, r.violations, r.not_rehearsed,
    r.host_peak

Fake tensors on the ``meta`` device take paths through torch that no real
run takes, and one of them crashes the process: lab 5's gpu8 block split
by DTensor (``parallelize_module`` on the rehearsal's meta GPU) is freed at
the end of its variant with a storage released twice (SIGSEGV in libc10's
``release_resources_and_decrement_weakrefs_``, 4 runs in 5 here). In a
notebook's rehearsal the ranks ran in the kernel, so the kernel died and
every later cell with it. Here each rank runs in a child forked from the
caller (after the run module is imported); what it gives back is plain
data through a pipe. A child killed by a signal is the rank's error
:data:`CRASHED`, a limit of the stand-in: a rank's Python code cannot end
its process that way, and on the GPU the same code runs real tensors. The
rank's printed lines are copied to the caller's stdout; a caller
interrupted while it waits (a cell's timeout) kills the child first. A
crashed child's Python stack (faulthandler, which pytest and ``python -X
faulthandler`` turn on and a fork inherits) goes to
``<run_dir>/rank<N>.fault``, named in the rank's line, not to the
caller's stderr: one line a crash.

A child that autograd refuses after the fork (the caller ran backward on
a device thread before: PyTorch's "Autograd and Fork") is run again in the
caller, as before (:data:`labkit.dryrun.cli.FORK_REFUSED`).
"""
from __future__ import annotations

import io
import json
import os
import pickle
import signal
import sys
from dataclasses import dataclass, field

# the error of a rank whose process a signal ended (hook.FAKE_LIMITS)
CRASHED = "the fake rank's process crashed"


@dataclass
class RankResult:
    record: dict | None = None
    error: str | None = None
    peak: int = 0
    not_rehearsed: int = 0
    violations: list = field(default_factory=list)
    p2p: list = field(default_factory=list)
    host_peak: int = 0     # bytes on the host (CPU) at once


def result_of(r) -> RankResult:
    """The plain data of a :class:`labkit.rehearse.world.Rank`."""
    from labkit.dist import _jsonable
    record = None if r.record is None else json.loads(
        json.dumps(r.record, default=_jsonable))
    return RankResult(record, r.error, r.peak, r.not_rehearsed,
                      list(r.rules.violations), list(r.rules.p2p),
                      r.host_peak)


def in_process(main, world_size, rank, argv, run_dir) -> RankResult:
    from labkit.rehearse.world import rehearsed_rank
    with rehearsed_rank(world_size, rank, run_dir) as r:
        r.main(main, argv)
        return result_of(r)   # inside: a fake value reads as NaN there


def fault_file(run_dir, rank) -> str:
    """Where a crashed rank child's Python stack is written."""
    return os.path.join(run_dir, f"rank{rank}.fault")


def _quiet_faults(path) -> None:
    """A fatal signal's stack to ``path``, not the inherited stderr."""
    import faulthandler
    if faulthandler.is_enabled():
        faulthandler.enable(file=open(path, "w"), all_threads=True)


def _child(write_fd, main, world_size, rank, argv, run_dir) -> None:
    out = io.StringIO()
    try:
        _quiet_faults(fault_file(run_dir, rank))
        sys.stdout = out
        try:
            payload = ("ok", in_process(main, world_size, rank, argv,
                                        run_dir))
        except BaseException as e:  # noqa: BLE001 - sent to the caller
            payload = ("raised", f"{type(e).__name__}: {e}")
        try:
            data = pickle.dumps((*payload, out.getvalue()))
        except Exception as e:  # noqa: BLE001 - said, not lost
            data = pickle.dumps(("raised", "its result does not pickle: "
                                 f"{type(e).__name__}: {e}", ""))
        with os.fdopen(write_fd, "wb") as f:
            f.write(data)
    finally:
        os._exit(0)


def _warm() -> None:
    """What every child would import again on its own, imported once here
    (a launch of 2 ranks of lab 11's gpu1 size: 9.4 s cold, 4.5 s warm)."""
    import torch._dynamo  # noqa: F401 - DTensor and FSDP2 reach it
    import torch.distributed.tensor  # noqa: F401
    import labkit.rehearse.world  # noqa: F401


def rank_apart(main, world_size, rank, argv, run_dir) -> RankResult:
    """:func:`in_process` in a forked child; see the module doc."""
    from labkit.dryrun.cli import FORK_REFUSED
    _warm()
    sys.stdout.flush()
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(write_fd, main, world_size, rank, argv, run_dir)
    try:    # from the fork on: an interrupt anywhere leaves no child
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as f:
            data = f.read()
        _, status = os.waitpid(pid, 0)
    except BaseException:   # interrupted (a cell's timeout): no orphan
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    fault = fault_file(run_dir, rank)
    stack = os.path.exists(fault) and os.path.getsize(fault) > 0
    if os.path.exists(fault) and not stack:
        os.remove(fault)
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status))
        where = ("by a signal from outside (this machine's memory?)"
                 if sig == signal.SIGKILL else
                 "in torch's code under fake tensors")
        said = f"; its stack: {fault}" if stack else ""
        return RankResult(error=f"{CRASHED} ({sig.name}) {where}{said}")
    if not data:
        raise RuntimeError(f"rank {rank} of the rehearsal gave no result "
                           f"(exit status {os.WEXITSTATUS(status)})")
    kind, value, printed = pickle.loads(data)
    if printed:
        sys.stdout.write(printed)
    if kind == "raised":
        raise RuntimeError(f"rank {rank} of the rehearsal: {value}")
    if value.error and FORK_REFUSED in value.error:
        return in_process(main, world_size, rank, argv, run_dir)
    return value
