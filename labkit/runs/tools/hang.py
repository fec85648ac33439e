"""A rank that stops participating: the others fail at the set timeout.

    torchrun --nproc-per-node 2 -m labkit.runs.tools.hang \
        --stall-rank 1 --at 3 --sleep-s 60 --timeout-s 5

Every rank all-reduces a tensor ``--collectives`` times, writing a
heartbeat (``labkit.measure.hang``) before and after each. Before
collective ``--at``, rank ``--stall-rank`` sleeps ``--sleep-s`` seconds,
as a rank stuck in a dead data loader or a deadlock would. The others wait
in the all-reduce until the process-group timeout (``--timeout-s``, set
through ``labkit.dist.init``; gloo enforces it on every collective, NCCL
through its watchdog with ``TORCH_NCCL_ASYNC_ERROR_HANDLING``), record how
long they waited and exit with the error; torchrun then stops the sleeper.

NCCL's ``all_reduce`` returns to the host as soon as the kernel is queued,
so a ``try`` around it never sees the timeout: the watchdog would abort the
rank later, somewhere else, with no ``waited_s`` written. Each collective
here is therefore issued with ``async_op=True`` and its work handle waited
on; under NCCL with ``TORCH_NCCL_BLOCKING_WAIT=1`` (:func:`blocking_wait`)
that ``wait()`` blocks the host and raises at the timeout, as gloo's does.
"""
from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as tdist

from labkit import dist
from labkit.measure.hang import Heartbeat


def blocking_wait(backend: str) -> dict:
    """The environment that makes ``work.wait()`` raise at the timeout on
    the host: NCCL's blocking wait (it also turns the watchdog's async
    abort off, so the rank reaches its ``except``); gloo needs nothing."""
    return {"TORCH_NCCL_BLOCKING_WAIT": "1"} if backend == "nccl" else {}


def timed_all_reduce(t: torch.Tensor, beat, i: int) -> None:
    """All-reduce ``t`` and wait for it on the host; on failure write a
    ``timed_out`` heartbeat with the seconds waited, then re-raise."""
    beat("enter", i, op="all_reduce")
    t0 = time.time()
    try:
        tdist.all_reduce(t, async_op=True).wait()
    except Exception:
        beat("timed_out", i, op="all_reduce", waited_s=time.time() - t0)
        raise
    beat("leave", i, op="all_reduce")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--stall-rank", type=int, default=1)
    p.add_argument("--at", type=int, default=3)
    p.add_argument("--collectives", type=int, default=5)
    p.add_argument("--sleep-s", type=float, default=60.0)
    p.add_argument("--timeout-s", type=float, default=5.0)
    a = p.parse_args(argv)
    if not 0 <= a.at < a.collectives or a.timeout_s <= 0:
        p.error("--at must be a collective of the run; --timeout-s > 0")
    # read when the process group starts
    os.environ.update(blocking_wait(dist.pick_backend()))
    ctx = dist.init(timeout_s=a.timeout_s)
    beat = Heartbeat(os.environ.get("LABKIT_RUN_DIR", "."), ctx.rank)
    t = torch.ones(1024, device=ctx.device)
    for i in range(a.collectives):
        if i == a.at and ctx.rank == a.stall_rank:
            beat("before", i, op="sleep")
            time.sleep(a.sleep_s)
        timed_all_reduce(t, beat, i)
    dist.save(ctx, {"collectives": a.collectives})
    dist.close()


if __name__ == "__main__":
    main()
