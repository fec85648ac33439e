"""Run 1F1B, ZB-H1, ZB-V and DualPipeV on real ranks; keep what each did.

    torchrun --nproc-per-node 2 -m labkit.runs.schedules \
        --schedules 1f1b,zb-h1,zbv,dualpipev --microbatches 4 \
        --layers 8 --hidden 64 --micro-batch 8

For each schedule of ``--schedules`` this rank builds the same model
(:func:`labkit.runs.schedules.stages.build`), its stages of it and
torch's schedule (:func:`~labkit.runs.schedules.stages.make_schedule`),
runs one warm-up step and ``--repeats`` timed steps on the same batch,
and keeps, of the last one: every forward, backward (``B``, or ``I``
and ``W`` split) with its start, end and the bytes its forward saved,
torch's own ``pipeline_order`` for this rank, and the largest
difference between its stages' gradients and the same model's
gradients computed in this one process (the reference: the schedules
must not change the arithmetic, only its order). Writes
``rank-<r>.json``: ``{"schedules": {name: {...}}, "config": {...}}``;
:mod:`labkit.measure.schedules` reads it.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as tdist

from labkit import dist
from labkit.predict.pipeline_parallel.schedules import SPLIT
from labkit.runs.schedules.stages import (build, chunks, data, loss_fn,
                                          make_schedule, torch_order)

SCHEDULES = ("1f1b",) + SPLIT


def reference_grads(model, x, y) -> list[torch.Tensor]:
    """Each block's weight gradient, the whole model in this process (on
    the device of ``x``: at the GPU profiles' sizes a CPU would take
    minutes), as CPU tensors."""
    model = model.to(x.device)
    model.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    return [blk[0].weight.grad.cpu() for blk in model]


def run_one(name: str, a, ctx, ref) -> dict:
    p, m = ctx.world_size, a.microbatches
    model = build(a.layers, a.hidden, a.seed)
    sched, mods, events = make_schedule(name, model, ctx.rank, p, m,
                                        ctx.device)
    x, y = (t.to(ctx.device) for t in data(a.hidden, m, a.micro_batch,
                                           a.seed))
    n = p * chunks(name)
    first, last = 0 in mods, n - 1 in mods
    steps = []
    for _ in range(1 + a.repeats):
        events.clear()
        for mod in mods.values():
            mod.zero_grad(set_to_none=True)
        tdist.barrier()
        t0 = time.perf_counter()
        sched.step(*((x,) if first else ()),
                   **({"target": y} if last else {}))
        steps.append(time.perf_counter() - t0)
    per = a.layers // n
    err = max(float((mods[s][k][0].weight.grad.cpu() - ref[s * per + k])
                    .abs().max()) for s in mods for k in range(per))
    return {"chunks": chunks(name), "stages": sorted(mods),
            "events": [{"kind": e[0], "stage": e[1], "chunk": e[2],
                        "microbatch": e[3], "start": e[4], "end": e[5],
                        "saved": e[6], "rank": ctx.rank} for e in events],
            "torch_order": torch_order(sched, ctx.rank),
            "step_s": steps[1:], "grad_max_err": err}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--schedules", default=",".join(SCHEDULES))
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--micro-batch", type=int, default=8,
                    help="rows per micro-batch")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout-s", type=float, default=120.0)
    a = ap.parse_args()
    names = [s for s in a.schedules.split(",") if s]
    bad = [s for s in names if s not in SCHEDULES]
    if bad:
        raise SystemExit(f"unknown schedule {bad[0]!r}: one of "
                         f"{', '.join(SCHEDULES)}")
    ctx = dist.init(timeout_s=a.timeout_s)
    p = ctx.world_size
    if a.layers % (2 * p):
        raise SystemExit(f"--layers {a.layers} must split into 2 x "
                         f"{p} stages (the V)")
    x, y = (t.to(ctx.device) for t in data(a.hidden, a.microbatches,
                                           a.micro_batch, a.seed))
    ref = reference_grads(build(a.layers, a.hidden, a.seed), x, y)
    del x, y
    dist.release(ctx)
    out = {}
    for name in names:
        out[name] = run_one(name, a, ctx, ref)
        dist.release(ctx)
    dist.save(ctx, {"config": vars(a), "schedules": out})
    dist.close()


if __name__ == "__main__":
    main()
