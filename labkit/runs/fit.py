"""Recompute, accumulate, fit: the measurements of chapter 12, one launch.

    torchrun --nproc-per-node 2 -m labkit.runs.fit --micro-batch 2 \
        --accumulation 2 --strategy fsdp2_full --recompute selective

Per rank it records

- ``recompute``: for none / full / selective, plain and under FSDP2
  (``fully_shard`` over checkpointed blocks), the bytes the forward keeps
  for backward (:func:`labkit.measure.activations.measure`) and the median
  seconds of a forward and of a forward + backward;
- ``accumulation``: the collectives of one step of ``--accumulation``
  micro-batches (:class:`labkit.measure.collectives.CollectiveCounter`)
  under DDP with ``no_sync`` and FSDP2 FULL_SHARD with and without
  ``set_requires_gradient_sync(False)``, and the gradient bytes held
  between micro-batches -- wrapped as the planner chose (``--recompute``,
  ``--bf16``, at ``--micro-batch``: on gpu8 the fp32 model without
  recompute would not fit, issue 28);
- ``deepspeed``: the same for DeepSpeed ZeRO-1/2/3 with
  ``gradient_accumulation_steps`` (:func:`deepspeed_accumulation`);
  both parts live in :mod:`labkit.runs.blocks.accumulation`;
- on a GPU each model is built on the meta device, sharded and
  materialised shard by shard on the rank's GPU
  (:func:`labkit.training.meta_init.built`): no rank holds the whole
  model on the host;
- ``train``: the chosen configuration trained for ``--steps`` steps: losses,
  step seconds, and the peak: on CPU the live tensor bytes
  (:class:`labkit.measure.fit.PeakBytes`, with the peak's composition); on
  a GPU ``max_memory_allocated`` and PyTorch's memory snapshot of the last
  step (:class:`labkit.measure.fit.MemoryHistory`), summarised.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import pickle
import statistics
import time
from pathlib import Path

import torch

from labkit import device as D
from labkit import dist
from labkit.measure.activations import measure
from labkit.measure.fit import MemoryHistory, PeakBytes, read_snapshot
from labkit.nn.model import add_shape_arguments, build, config_from_args
from labkit.training.recompute import MODES, apply
from labkit.runs.blocks.accumulation import (  # noqa: F401 - re-exported
    ACCUMULATION_RUNS, NO_RESHARD, _data, _grad_bytes, accumulate,
    accumulation, accumulation_setup, deepspeed_accumulation)
from labkit.training.train import make_optimizer, mean_over_ranks
from labkit.training.meta_init import built
from labkit.training.wrap import autocast


def _median_s(fn, repeats, device):
    fn()   # warm-up: the first call builds caches
    out = []
    for _ in range(repeats):
        D.sync(device)
        t0 = time.perf_counter()
        fn()
        D.sync(device)
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def recompute(config, ctx, micro_batch, bf16, repeats,
              strategies=("local", "fsdp2_full")) -> list[dict]:
    x, y = _data(config, ctx, micro_batch, 0)
    rows = []
    for strategy in strategies:
        for mode in MODES:
            if strategy == "local":
                model = apply(build(config), mode).to(ctx.device)
            else:
                model = built(lambda: build(config), strategy, ctx,
                              bf16=bf16, recompute=mode)
            amp = autocast(ctx, "ddp" if strategy == "local" else strategy,
                           bf16)
            got = measure(model, x, y, amp)
            got.pop("loss").backward()

            def fwd():
                with amp, torch.no_grad():
                    model(x, y)

            def step():
                with amp:
                    loss = model(x, y)
                loss.backward()
            fwd_s = _median_s(fwd, repeats, ctx.device)
            step_s = _median_s(step, repeats, ctx.device)
            rows.append({"strategy": strategy, "recompute": mode,
                         "micro_batch": micro_batch, "kept": got["total"],
                         "weight_cast": got["weight_cast"],
                         "forward_s": fwd_s, "step_s": step_s})
            del model
            dist.release(ctx)
    return rows


def train(config, ctx, a) -> dict:
    model = built(lambda: build(config, a.seed), a.strategy, ctx,
                  bf16=a.bf16, recompute=a.recompute)
    opt = make_optimizer(model)
    amp = autocast(ctx, a.strategy, a.bf16)
    losses, step_s, peak = [], [], 0
    D.reset_peak(ctx.device)
    history = MemoryHistory(ctx.device, Path(os.environ.get(
        "LABKIT_RUN_DIR", ".")) / f"memory-snapshot-rank{ctx.rank}.pickle")

    def step(i):
        total = 0.0
        for j in range(a.accumulation):
            x, y = _data(config, ctx, a.micro_batch,
                         i * a.accumulation + j, a.seed)
            with amp:
                loss = model(x, y) / a.accumulation
            loss.backward()
            total += loss.detach()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return total

    for i in range(a.steps):        # timed, nothing watching
        t0 = time.perf_counter()
        total = step(i)
        D.sync(ctx.device)
        step_s.append(time.perf_counter() - t0)
        losses.append(mean_over_ranks(total))
    # one more step, watched: the peak and where the memory went
    tracker = (PeakBytes(model, opt) if not ctx.is_cuda
               else contextlib.nullcontext())
    with tracker, history:
        step(a.steps)
    if not ctx.is_cuda:
        peak = {"bytes": tracker.bytes, "after_op": tracker.at,
                "composition": tracker.composition}
    return {"strategy": a.strategy, "recompute": a.recompute,
            "micro_batch": a.micro_batch, "accumulation": a.accumulation,
            "losses": losses, "step_s": step_s,
            "live_peak": peak,   # CPU: PeakBytes; GPU: the allocator's
            "allocator_peak": D.peak_bytes(ctx.device, None),
            "snapshot": history.path,
            "snapshot_top": (read_snapshot(pickle.loads(
                Path(history.path).read_bytes())) if history.path else None)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--parts",
                   default="recompute,accumulation,deepspeed,train")
    p.add_argument("--recompute-strategies", default="local,fsdp2_full",
                   help="local: one unwrapped model per rank (small sizes)")
    p.add_argument("--deepspeed-stages", default="1,2,3")
    p.add_argument("--accumulation-runs", default=",".join(ACCUMULATION_RUNS))
    p.add_argument("--strategy", default="fsdp2_full")
    p.add_argument("--recompute", default="selective", choices=MODES)
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--accumulation-micro-batch", type=int, default=None,
                   help="the accumulation part's (default --micro-batch)")
    p.add_argument("--accumulation", type=int, default=2)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    add_shape_arguments(p)
    a = p.parse_args(argv)
    config = config_from_args(a)
    ctx = dist.init()
    parts = a.parts.split(",")
    out = {"device": D.name(ctx.device), "config": vars(a)}
    if "recompute" in parts:
        out["recompute"] = recompute(config, ctx, a.micro_batch, a.bf16,
                                     a.repeats,
                                     a.recompute_strategies.split(","))
    if "accumulation" in parts:
        out["accumulation"] = accumulation(config, ctx,
                                           a.accumulation_micro_batch
                                           or a.micro_batch,
                                           a.accumulation,
                                           a.accumulation_runs.split(","),
                                           a.bf16, a.recompute)
    if "deepspeed" in parts:
        out["deepspeed"] = deepspeed_accumulation(
            config, ctx, a.micro_batch, a.accumulation,
            [int(s) for s in a.deepspeed_stages.split(",")])
    if "train" in parts:
        out["train"] = train(config, ctx, a)
    dist.save(ctx, out)
    dist.close()


if __name__ == "__main__":
    main()
