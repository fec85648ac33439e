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
from labkit.measure.collectives import CollectiveCounter
from labkit.measure.fit import MemoryHistory, PeakBytes, read_snapshot
from labkit.measure.memory import unique_bytes
from labkit.model import (add_shape_arguments, batch, build,
                          config_from_args, local_batch)
from labkit.recompute import MODES, apply
from labkit.train import make_optimizer, mean_over_ranks
from labkit.wrap import autocast, wrap


def _data(config, ctx, micro_batch, step, seed=0):
    x, y = batch(config, micro_batch * ctx.world_size, step, seed,
                 device=ctx.device)
    return local_batch(x, y, ctx.rank, ctx.world_size)


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
            model = apply(build(config), mode)
            if strategy == "local":
                model.to(ctx.device)
            else:
                model = wrap(model, strategy, ctx, bf16=bf16)
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


ACCUMULATION_RUNS = {"ddp": ("ddp", True), "fsdp2_full": ("fsdp2_full", False),
                     "fsdp2_full_no_sync": ("fsdp2_full", True),
                     "fsdp2_full_no_reshard": ("fsdp2_full", True)}
# FSDP2's documented accumulation without re-gathering (issue 29, item 6):
# set_reshard_after_forward(False) + set_reshard_after_backward(False) +
# set_requires_gradient_sync(False) until the last micro-batch, so the
# weights are gathered once per step and stay unsharded between
# micro-batches (the memory it costs: the unsharded weights, beside the
# unsharded gradients)
NO_RESHARD = {"fsdp2_full_no_reshard"}


def accumulation_setup(config, ctx, strategy, bf16=False,
                       recompute_mode="none"):
    """Model, optimizer and autocast of one accumulation run, wrapped as
    the planner chose: its recompute, then ``wrap`` with its precision
    (the run of ``train`` builds the same; the dry run calls this)."""
    model = wrap(apply(build(config), recompute_mode), strategy, ctx,
                 bf16=bf16)
    return model, make_optimizer(model), autocast(ctx, strategy, bf16)


def accumulate(model, amp, strategy, no_sync, k, data, forward=None,
               keep=False):
    """One step's ``k`` micro-batches (``data(i) -> (x, y)``), gradient
    sync only on the last (DDP ``no_sync``; FSDP2
    ``set_requires_gradient_sync``); returns the gradient bytes held
    between micro-batches. ``forward(model, x, y)`` defaults to a call.
    ``keep`` (FSDP2): the weights stay unsharded until the last backward
    (:data:`NO_RESHARD`)."""
    forward = forward or (lambda m, x, y: m(x, y))
    held = 0
    if keep:
        model.set_reshard_after_forward(False)
    for i in range(k):
        last = i == k - 1
        x, y = data(i)
        if strategy == "ddp":
            ctx_ = (model.no_sync() if no_sync and not last
                    else contextlib.nullcontext())
        else:
            model.set_requires_gradient_sync(last or not no_sync)
            if keep:
                model.set_reshard_after_backward(last)
            ctx_ = contextlib.nullcontext()
        with ctx_:
            with amp:
                loss = forward(model, x, y) / k
            loss.backward()
        if i == k - 2 or k == 1:
            held = _grad_bytes(model)
            if keep:
                held = {"grads": held, "params": _unsharded_bytes(model)}
    return held


def accumulation(config, ctx, micro_batch, k,
                 runs=tuple(ACCUMULATION_RUNS), bf16=False,
                 recompute_mode="none") -> list[dict]:
    rows = []
    for run in runs:
        strategy, no_sync = ACCUMULATION_RUNS[run]
        model, opt, amp = accumulation_setup(config, ctx, strategy, bf16,
                                             recompute_mode)
        D.reset_peak(ctx.device)
        for step in range(3):   # DDP rebuilds its buckets in step 1
            counter = CollectiveCounter()
            with counter if step == 2 else contextlib.nullcontext():
                held = accumulate(
                    model, amp, strategy, no_sync, k,
                    lambda i: _data(config, ctx, micro_batch, step * k + i),
                    keep=run in NO_RESHARD)
                opt.step()
                opt.zero_grad(set_to_none=True)
        params_held = 0
        if isinstance(held, dict):
            held, params_held = held["grads"], held["params"]
        rows.append({"run": run, "strategy": strategy, "no_sync": no_sync,
                     "no_reshard": run in NO_RESHARD,
                     "params_held_between": params_held,
                     "micro_batches": k, "micro_batch": micro_batch,
                     "bf16": bf16, "recompute": recompute_mode,
                     "summary": counter.summary(),
                     "grads_held_between": held,
                     "allocator_peak": D.peak_bytes(ctx.device, None)})
        del model, opt
        dist.release(ctx)
    return rows


def deepspeed_accumulation(config, ctx, micro_batch, k,
                           stages=(1, 2, 3)) -> list[dict]:
    """DeepSpeed ZeRO-1/2/3 with ``gradient_accumulation_steps = k``: the
    gradient- and weight-sized collectives of one step (the scalar
    all-reduces of its overflow and norm checks left out)."""
    from labkit.runs.zero import skip_shm_op
    from labkit.zero_config import ZeroConfig
    skip_shm_op()
    import deepspeed
    rows = []
    for stage in stages:
        cfg = ZeroConfig(stage=stage, micro_batch=micro_batch,
                         world_size=ctx.world_size, grad_accum=k,
                         stage3_param_persistence_threshold=0)
        model = build(config)
        engine, *_ = deepspeed.initialize(
            model=model, optimizer=make_optimizer(model),
            config=cfg.to_json())
        for step in range(2):   # the first step sets up; count the second
            counter = CollectiveCounter()
            with counter:
                for i in range(k):
                    x, y = _data(config, ctx, micro_batch, step * k + i)
                    engine.backward(engine(x, y))
                    engine.step()
        big = {}
        for r in counter.records:
            if r["numel"] > 2 and r["op"] != "broadcast":
                d = big.setdefault(r["op"], {"calls": 0, "bytes": 0})
                d["calls"] += 1
                d["bytes"] += r["bytes"]
        rows.append({"stage": stage, "micro_batches": k, "summary": big,
                     "ds_config": cfg.to_json()})
        destroy = getattr(engine, "destroy", None)
        if callable(destroy):
            destroy()
        del engine, model
        dist.release(ctx)
    return rows


def _grad_bytes(model) -> int:
    """Gradient bytes held now: sharded grads plus FSDP2's unsharded
    accumulated ones (kept while gradient sync is off)."""
    tensors = [p.grad for p in model.parameters()]
    for m in model.modules():
        get = getattr(m, "_get_fsdp_state", None)
        group = get()._fsdp_param_group if callable(get) else None
        for fp in (group.fsdp_params if group else []):
            tensors.append(getattr(fp, "unsharded_accumulated_grad", None))
            unsharded = getattr(fp, "_unsharded_param", None)
            tensors.append(getattr(unsharded, "grad", None))
    return unique_bytes(tensors)


def _unsharded_bytes(model) -> int:
    """Bytes of FSDP2's unsharded (gathered) weights alive now."""
    from labkit.measure.memory import unsharded_param_bytes
    return unsharded_param_bytes(model)


def train(config, ctx, a) -> dict:
    model = wrap(apply(build(config, a.seed), a.recompute), a.strategy, ctx,
                 bf16=a.bf16)
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
        out["accumulation"] = accumulation(config, ctx, a.micro_batch,
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
