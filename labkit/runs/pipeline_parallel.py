"""Pipeline parallelism of the course's GPT with torch.distributed.pipelining.

    torchrun --nproc-per-node 4 -m labkit.runs.pipeline_parallel \
        --stages 2,4 --schedules gpipe,1f1b,interleaved --microbatches 2,4,8

Each pipeline depth ``p`` of ``--stages`` runs on ranks ``0..p-1`` (the
others wait), so one launch measures several depths. The GPT of
``labkit.nn.model`` is cut into ``p x v`` stages of equal numbers of
blocks (the embedding rides with the first stage, the final LayerNorm and
output layer with the last); rank ``r`` runs stage ``r`` (GPipe, 1F1B) or
stages ``r, r + p, ...`` (interleaved 1F1B, ``v = --chunks``), with
``torch.distributed.pipelining``'s ``ScheduleGPipe``, ``Schedule1F1B`` and
``ScheduleInterleaved1F1B`` (:mod:`labkit.runs.blocks.pp_stages`).

Two measurements per schedule:

1. *Losses*: ``--steps`` training steps (SGD) of a global batch of
   ``--check-microbatches`` micro-batches; rank 0 also trains the whole
   model in one process on the same batches as the reference.
2. *Bubble* (at the depths of ``--sweep-stages``): for each micro-batch
   count of ``--microbatches`` that every schedule accepts at depth ``p``
   (``m >= p``, a multiple of ``p``; micro-batch size fixed), one warm-up
   step and ``--repeats`` timed steps. Each rank records the start and
   end of every forward and backward chunk it runs
   (``PipelineStage.forward_one_chunk`` / ``backward_one_chunk``); the
   busy time is their sum, the step time the slowest rank's, and the
   measured bubble ``(p T - sum busy) / sum busy``, the quantity
   Narayanan et al. 2021 (Sec. 2.2) write as ``(p - 1)/m``. The events of
   the last timed step are kept for the timeline picture.

Ranks outside a depth wait for it in a barrier of their own: a gloo group
with ``--wait-timeout-s`` (default an hour), not the process group's
``--timeout-s`` (120 s), which a depth's model build and runs at the gpu8
sizes outlast (issue 17, defect 6). The launch's own timeout still bounds
the whole run.
"""
from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta

import torch
import torch.distributed as tdist

from labkit import device as D
from labkit import dist
from labkit.nn.model import add_shape_arguments, batch, build, config_from_args
from labkit.runs.blocks.pp_stages import (  # noqa: F401 (re-exported)
    Stage, instrument, loss_fn, make_pipeline, split, step)

SCHEDULES = ("gpipe", "1f1b", "interleaved")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def sweep_counts(counts: list[int], p: int) -> list[int]:
    """Micro-batch counts every schedule accepts at depth ``p``.

    1F1B needs ``m >= p`` (torch) and the interleaved bubble formula walks
    micro-batches in groups of ``p`` (Megatron-LM): ``m`` a multiple of p.
    """
    return [m for m in counts if m >= p and m % p == 0]


def run_depth(p: int, schedules, a, ctx, cfg, dtype, group,
              sweep: bool = True) -> dict:
    """Losses and the bubble sweep of every schedule on ranks 0..p-1."""
    def fresh():
        return build(cfg, seed=a.seed).to(device=ctx.device, dtype=dtype)

    def data(k, m):
        return batch(cfg, m * a.micro_batch, step=k, seed=a.seed,
                     device=ctx.device)

    out_all = {}
    for s in schedules:
        v = a.chunks if s == "interleaved" else 1
        out = {"chunks": v, "losses": [], "sweep": {}}
        # 1. losses against the reference
        model = fresh()
        sched, params = make_pipeline(s, model, ctx, p, v,
                                      a.check_microbatches, group)
        opt = torch.optim.SGD(params, lr=a.lr)
        for k in range(a.steps):
            x, y = data(k, a.check_microbatches)
            out["losses"].append(step(sched, ctx, x, y, p))
            opt.step()
            opt.zero_grad(set_to_none=True)
        # 2. the bubble sweep, micro-batch size fixed
        for m in (sweep_counts(a.microbatches, p) if sweep else []):
            events: list = []
            sched, params = make_pipeline(s, model, ctx, p, v, m, group,
                                          events)
            x, y = data(0, m)
            runs = []
            for r in range(1 + a.repeats):
                events.clear()
                for q in params:
                    q.grad = None
                D.sync(ctx.device)
                tdist.barrier(group=group)
                t0 = time.perf_counter()
                step(sched, ctx, x, y, p)
                D.sync(ctx.device)
                t1 = time.perf_counter()
                if r == 0:
                    continue  # warm-up: shape inference, allocations
                busy = sum(e[5] - e[4] for e in events)
                stats = torch.tensor([t1 - t0, busy], dtype=torch.float64,
                                     device=ctx.device)
                gathered = [torch.zeros_like(stats) for _ in range(p)]
                tdist.all_gather(gathered, stats, group=group)
                T = max(g[0].item() for g in gathered)
                busy_all = [g[1].item() for g in gathered]
                runs.append({"step_s": T, "busy_s": busy_all,
                             "bubble": (p * T - sum(busy_all))
                             / sum(busy_all)})
            out["sweep"][str(m)] = {
                "runs": runs,
                "bubble_median": statistics.median(r["bubble"]
                                                   for r in runs),
                "step_s_median": statistics.median(r["step_s"]
                                                   for r in runs),
                "t0": t0,
                "events": [{"kind": e[0], "stage": e[1], "chunk": e[2],
                            "microbatch": e[3], "start": e[4],
                            "end": e[5], "rank": ctx.rank}
                           for e in events]}
        out_all[s] = out
        del model, sched, opt
    return out_all


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--schedules", default="gpipe,1f1b,interleaved")
    ap.add_argument("--stages", default="",
                    help="pipeline depths to run, e.g. 2,4 (default: the "
                         "world size); a depth p uses ranks 0..p-1")
    ap.add_argument("--sweep-stages", default=None,
                    help="depths that run the bubble sweep (default: all); "
                         "on a CPU with fewer cores than ranks, only the "
                         "depths whose ranks each get a core time fairly")
    ap.add_argument("--chunks", type=int, default=2,
                    help="model chunks per rank for the interleaved schedule")
    ap.add_argument("--microbatches", default="2,4,8",
                    help="micro-batch counts of the bubble sweep")
    ap.add_argument("--check-microbatches", type=int, default=4)
    ap.add_argument("--micro-batch", type=int, default=4,
                    help="sequences per micro-batch")
    add_shape_arguments(ap, layers=8, hidden=192, seq=64)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout-s", type=float, default=120.0,
                    help="the process group's timeout (every collective)")
    ap.add_argument("--wait-timeout-s", type=float, default=3600.0,
                    help="how long ranks outside a depth wait for it")
    ap.add_argument("--hold-s", type=float, default=0.0,
                    help="ranks inside a depth sleep this long after it "
                         "(a test's wait longer than --timeout-s)")
    a = ap.parse_args()
    schedules = [s for s in a.schedules.split(",") if s]
    a.microbatches = [int(m) for m in a.microbatches.split(",") if m]
    if set(schedules) - set(SCHEDULES):
        raise SystemExit(f"unknown schedule in {schedules}: {SCHEDULES}")
    ctx = dist.init(timeout_s=a.timeout_s)
    waiting = tdist.new_group(backend="gloo", timeout=timedelta(
        seconds=a.wait_timeout_s))     # the barrier of the ranks left out
    depths = ([int(p) for p in a.stages.split(",") if p] if a.stages
              else [ctx.world_size])
    sweep_depths = (depths if a.sweep_stages is None else
                    [int(p) for p in a.sweep_stages.split(",") if p])
    for p in depths:
        if not 2 <= p <= ctx.world_size:
            raise SystemExit(f"depth {p} needs 2..{ctx.world_size} ranks")
        for s in schedules:
            v = a.chunks if s == "interleaved" else 1
            if a.layers % (p * v):
                raise SystemExit(f"{s}: {a.layers} layers do not split into "
                                 f"{p * v} stages")
        if a.check_microbatches < p or a.check_microbatches % p:
            raise SystemExit(f"--check-microbatches must be a multiple of "
                             f"every depth (>= {p})")
    dtype = DTYPES[a.dtype]
    cfg = config_from_args(a)
    record = {"config": vars(a), "depths": {}}
    if ctx.rank == 0:  # the single-process reference
        ref = build(cfg, seed=a.seed).to(device=ctx.device, dtype=dtype)
        opt = torch.optim.SGD(ref.parameters(), lr=a.lr)
        ref_losses = []
        for k in range(a.steps):
            x, y = batch(cfg, a.check_microbatches * a.micro_batch, step=k,
                         seed=a.seed, device=ctx.device)
            loss = ref(x, y)
            ref_losses.append(loss.item())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        record["reference_losses"] = ref_losses
        del ref, opt
    record["seconds"], record["waited_s"] = {}, {}
    for p in depths:
        # every rank joins new_group; ranks >= p wait in the barrier below,
        # on the gloo group with the long timeout
        group = (None if p == ctx.world_size
                 else tdist.new_group(list(range(p))))
        t0 = time.perf_counter()
        if ctx.rank < p:
            record["depths"][str(p)] = run_depth(p, schedules, a, ctx, cfg,
                                                 dtype, group,
                                                 p in sweep_depths)
            time.sleep(a.hold_s)
        t1 = time.perf_counter()
        tdist.barrier(group=waiting)
        record["waited_s"][str(p)] = time.perf_counter() - t1
        record["seconds"][str(p)] = time.perf_counter() - t0
    dist.save(ctx, record)
    dist.close()


if __name__ == "__main__":
    main()
