"""Count the bytes of every collective of DDP and FSDP steps, in one launch.

    torchrun --nproc-per-node 4 -m labkit.runs.sharding \
        --strategies ddp,fsdp2_full,fsdp2_grad_op,fsdp1_full_shard,\
fsdp1_shard_grad_op,fsdp1_no_shard,fsdp1_hybrid_shard \
        --shard-group 2 --bucket-caps 0.02,0.05,0.1,0.25 --steps 3

For each strategy (``labkit.training.wrap`` names) the tiny GPT trains ``--steps``
steps from the same seed on the same batches; a
:class:`~labkit.measure.collectives.CollectiveCounter` records every
collective of every step. The last step is the one to compare with
``labkit.predict.sharding``: DDP rebuilds its buckets after its first
iteration, and the second step's forward broadcasts the new bucket order
(two small ``broadcast`` calls), so only from the third step on is a step
"steady". The bucket experiment then trains DDP once per
``--bucket-caps`` value (MiB) and records the all-reduce calls of its
steady step beside DDP's own ``rebuilt_bucket_sizes``.

With ``--time-steps K`` (the GPU profile) each strategy is also timed:
K more steps without the counter (the step time), the same steps of an
unwrapped replica on one device without communication (the compute), and
the counted collectives replayed alone (the communication). The share of
communication hidden behind compute is (compute + comm - step) / comm,
clipped to [0, 1]. The run also calibrates its own alpha-beta per
collective (``labkit.measure.alpha_beta``, saved as ``alpha_beta``), so
that communication time is predicted for the links it ran on.

On several nodes (``launch(..., nnodes=2, node_rank=i, rdzv_endpoint=...)``
or torchrun on each node) every rank also saves ``node_of_rank``, the node
(torchrun's ``GROUP_RANK``) each rank ran on, so the counted bytes split
into inside a node and across nodes
(:func:`labkit.measure.collectives.split_by_node`)::

    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d \
        --rdzv-endpoint node0:29500 -m labkit.runs.sharding \
        --strategies fsdp2_hybrid --shard-group 8
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import time

import torch
import torch.distributed as tdist

from labkit import dist
from labkit.measure.collectives import CollectiveCounter
from labkit.nn.model import (add_shape_arguments, build, config_from_args,
                             count_params, GPTConfig, rank_batches,
                             sharding_units)
from labkit.training.train import (make_optimizer, mean_over_ranks, setup,
                                   train_step)
from labkit.training.wrap import STRATEGIES, autocast, check_strategy


def run_strategy(strategy: str, config: GPTConfig, ctx, a,
                 bucket_cap_mb: float) -> dict:
    model, opt, amp = setup(strategy, config, ctx, a.bf16, a.seed,
                            bucket_cap_mb=bucket_cap_mb,
                            shard_group=a.shard_group)
    losses, per_step, records = [], [], []
    for x, y in rank_batches(config, a.batch, ctx, a.steps, a.seed):
        dist.sync(ctx)
        with CollectiveCounter() as counter:
            loss = train_step(model, opt, x, y, amp)
            dist.sync(ctx)
        losses.append(mean_over_ranks(loss))  # outside the counter
        per_step.append(counter.summary())
        records = counter.records
    out = {"strategy": strategy, "bucket_cap_mb": bucket_cap_mb,
           "losses": losses, "per_step": per_step, "records": records}
    if strategy == "ddp":
        data = model._get_ddp_logging_data()
        out["rebuilt_bucket_sizes"] = [
            int(s) for s in str(data.get("rebuilt_bucket_sizes", "")).split(
                ",") if s.strip()]
    if a.time_steps:
        out["timing"] = _timing(model, opt, amp, strategy, config, ctx, a,
                                records)
    del model, opt
    dist.release(ctx)
    return out


def _step_seconds(model, opt, amp, data, ctx) -> list[float]:
    """Wall seconds of one training step per batch in ``data``."""
    out = []
    for x, y in data:
        dist.sync(ctx)
        t0 = time.perf_counter()
        train_step(model, opt, x, y, amp)
        dist.sync(ctx)
        out.append(time.perf_counter() - t0)
    return out


def _timing(model, opt, amp, strategy, config, ctx, a, records) -> dict:
    """Step time, compute-only time and communication-only time (medians)."""
    data = rank_batches(config, a.batch, ctx, a.time_steps, a.seed,
                        start=a.steps)
    step_s = _step_seconds(model, opt, amp, data, ctx)
    # compute alone: the same local batches on an unwrapped replica
    alone = build(config, a.seed).to(ctx.device)
    compute_s = _step_seconds(alone, make_optimizer(alone),
                              autocast(ctx, "ddp", a.bf16), data, ctx)
    del alone
    comm_s = [replay(records, ctx) for _ in range(max(3, a.time_steps // 2))]
    step, compute, comm = (statistics.median(v)
                           for v in (step_s, compute_s, comm_s))
    hidden = (min(1.0, max(0.0, (compute + comm - step) / comm))
              if comm > 0 else 1.0)
    return {"step_s": step, "compute_s": compute, "comm_s": comm,
            "hidden_fraction": hidden}


def replay(records, ctx) -> float:
    """Run the recorded collectives again, alone, back to back; seconds."""
    from torch.distributed.distributed_c10d import _resolve_process_group
    work = []
    for r in records:
        if r["op"] not in ("all_reduce", "all_gather", "reduce_scatter"):
            continue
        group = _resolve_process_group(r["group"]) if r["group"] else None
        dtype = getattr(torch, r["dtype"])
        g = r["group_size"] or 1
        full = torch.ones(r["numel"], dtype=dtype, device=ctx.device)
        part = torch.ones(r["numel"] // g, dtype=dtype, device=ctx.device)
        work.append((r["op"], full, part, group))
    tdist.barrier()
    dist.sync(ctx)
    t0 = time.perf_counter()
    for op, full, part, group in work:
        if op == "all_reduce":
            tdist.all_reduce(full, group=group)
        elif op == "all_gather":
            tdist.all_gather_into_tensor(full, part, group=group)
        else:
            tdist.reduce_scatter_tensor(part, full, group=group)
    dist.sync(ctx)
    return time.perf_counter() - t0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--strategies", default="ddp,fsdp2_full,fsdp2_grad_op")
    p.add_argument("--steps", type=int, default=3,
                   help="counted steps per strategy (>= 3: steady state)")
    p.add_argument("--bucket-cap-mb", type=float, default=25.0,
                   help="DDP bucket cap of the strategy runs (MiB)")
    p.add_argument("--bucket-caps", default="",
                   help="comma-separated caps (MiB) for the bucket runs")
    p.add_argument("--shard-group", type=int, default=2,
                   help="ranks per shard group (hybrid strategies)")
    p.add_argument("--time-steps", type=int, default=0)
    p.add_argument("--batch", type=int, default=8, help="global batch")
    add_shape_arguments(p)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    strategies = [s for s in a.strategies.split(",") if s]
    bad = [s for s in strategies if s not in STRATEGIES]
    if bad:
        p.error(f"unknown strategies {bad}; choose from {STRATEGIES}")
    if a.steps < 1 or a.time_steps < 0:
        p.error("--steps must be >= 1 and --time-steps >= 0")
    caps = [float(c) for c in a.bucket_caps.split(",") if c]
    if any(c <= 0 for c in caps):
        p.error("bucket caps must be positive")
    config = config_from_args(a)
    ctx = dist.init()
    for s in strategies:
        check_strategy(s, ctx.world_size, a.shard_group)
    model = build(config, a.seed)
    unit_shapes = [[list(q.shape) for q in u.parameters()]
                   for u in sharding_units(model)]
    n_params = count_params(model)
    del model
    nodes: list = [None] * ctx.world_size
    tdist.all_gather_object(nodes, (int(os.environ.get("GROUP_RANK", 0)),
                                    socket.gethostname()))
    runs = [run_strategy(s, config, ctx, a, a.bucket_cap_mb)
            for s in strategies]
    # this machine's own alpha-beta, to price communication time here
    fits = None
    if a.time_steps:
        from labkit.measure.alpha_beta import calibrate
        fits = calibrate(ctx)
    buckets = []
    if caps:
        b = argparse.Namespace(**{**vars(a), "time_steps": 0})
        buckets = [run_strategy("ddp", config, ctx, b, cap) for cap in caps]
    dist.save(ctx, {"params": n_params, "unit_shapes": unit_shapes,
                    "config": vars(a), "runs": runs, "buckets": buckets,
                    "alpha_beta": fits,
                    "node_of_rank": [n for n, _ in nodes],
                    "hosts": [h for _, h in nodes],
                    "device": (torch.cuda.get_device_name(ctx.device)
                               if ctx.is_cuda else "cpu")})
    dist.close()


if __name__ == "__main__":
    main()
