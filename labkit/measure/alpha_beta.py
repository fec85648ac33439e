"""The run's own alpha-beta: time each collective here, fit, price with it.

    from labkit.measure.alpha_beta import calibrate, price_calls
    fits = calibrate(ctx)                 # every rank, inside a launch
    price_calls(predicted_calls, fits)    # seconds, on this machine's links

A prediction of communication *time* needs the link it runs on. On a GPU
node that is NVLink or InfiniBand (``labkit.predict.collectives.LINKS``);
on the CPU profile it is gloo over loopback on a shared machine, which no
table lists. So a run calibrates its own: it times all-reduce, all-gather
and reduce-scatter at a few sizes (nccl-tests' method, as lab 2 does) and
fits t = steps * alpha + ring_bytes / beta per operation
(:func:`labkit.predict.collectives.fit_alpha_beta`; Hockney 1994, Thakur
et al. 2005, Sec. 2). The fits then price any list of calls for *this*
machine, so a predicted gloo time is compared with a measured gloo time,
never with a GPU link's.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as tdist

from labkit import dist
from labkit.predict.collectives import (fit_alpha_beta, ring_bytes_sent,
                                        ring_steps)

OPS = ("all_reduce", "all_gather", "reduce_scatter")
SIZES = tuple(4096 * 4 ** k for k in range(6))     # 4 KiB .. 4 MiB


def _call(op, full, part):
    if op == "all_reduce":
        tdist.all_reduce(full)
    elif op == "all_gather":
        tdist.all_gather_into_tensor(full, part)
    else:
        tdist.reduce_scatter_tensor(part, full)


def calibrate(ctx, ops=OPS, sizes=SIZES, iters: int = 4,
              rounds: int = 3) -> dict:
    """Fit alpha and beta of each op on the world group (every rank)."""
    n = ctx.world_size
    out = {}
    for op in ops:
        seconds = []
        for nbytes in sizes:
            numel = max(n, nbytes // 4 // n * n)
            full = torch.ones(numel, device=ctx.device)
            part = torch.ones(numel // n, device=ctx.device)
            _call(op, full, part)                      # warm-up
            best = float("inf")
            for _ in range(rounds):
                tdist.barrier()
                dist.sync(ctx)
                t0 = time.perf_counter()
                for _ in range(iters):
                    _call(op, full, part)
                dist.sync(ctx)
                best = min(best, (time.perf_counter() - t0) / iters)
            seconds.append(best)
        # every rank uses rank 0's fit, so all predict the same
        box = [(list(sizes), seconds)]
        tdist.broadcast_object_list(box, src=0)
        fit = fit_alpha_beta(op, n, *box[0])
        out[op] = {"alpha": fit.alpha, "beta": fit.beta, "ranks": n,
                   "rmse_rel": fit.rmse_rel, "sizes": box[0][0],
                   "seconds": box[0][1]}
    return out


def call_seconds(op: str, nbytes: float, group_size: int,
                 fits: dict) -> float:
    """One call on this machine: steps(op, g) * alpha + sent / beta."""
    if group_size <= 1:
        return 0.0
    f = fits[op]
    return (ring_steps(op, group_size) * f["alpha"]
            + ring_bytes_sent(op, nbytes, group_size) / f["beta"])


def price_calls(calls, fits: dict) -> float:
    """Seconds of a list of calls (``op``, ``bytes``, ``group_size``)."""
    return sum(call_seconds(c["op"], c["bytes"], c["group_size"] or 1, fits)
               for c in calls if c["op"] in fits)


def overlap(comms, fits: dict, compute_s: float) -> dict:
    """The chapter's overlap model (``predict.sharding.overlap``) on this
    machine: ``comms`` from ``predict.sharding.step_comm`` priced with the
    fits, compute split 1:2 between forward and backward (2 and 4 FLOPs
    per parameter and token); the step phase's all-gather (ZeRO-1/2) has
    nothing to hide behind."""
    compute = {"forward": compute_s / 3, "backward": 2 * compute_s / 3,
               "step": 0.0}
    comm = {p: sum(call_seconds(c.op, c.nbytes, c.group_size, fits)
                   for c in comms if c.phase == p) for p in compute}
    exposed = sum(max(0.0, comm[p] - compute[p]) for p in compute)
    total = sum(comm.values())
    return {"comm_s": total, "exposed_s": exposed,
            "step_s": compute_s + exposed,
            "hidden_fraction": 1 - exposed / total if total else 1.0}
