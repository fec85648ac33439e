"""Lab 12's accumulation part: k micro-batches per step, collectives counted.

    torchrun --nproc-per-node 2 -m labkit.runs.fit --parts accumulation \
        --micro-batch 2 --accumulation 3 --recompute selective --bf16

Imported by :mod:`labkit.runs.fit` (its ``accumulation`` and ``deepspeed``
parts) and by the dry run (:mod:`labkit.dryrun.fit_lab`), which steps the
same :func:`accumulation_setup` and :func:`accumulate` on fake tensors.
Each run is wrapped as the planner chose -- its recompute, bf16, at its
micro-batch (issue 28: the fp32 model without recompute does not fit
gpu8's 80 GB) -- and records the collectives of one steady step
(:class:`labkit.measure.collectives.CollectiveCounter`), the gradient
bytes held between micro-batches and, on a GPU, the allocator's peak.
"""
from __future__ import annotations

import contextlib

from labkit import device as D
from labkit import dist
from labkit.measure.collectives import CollectiveCounter
from labkit.measure.memory import unique_bytes
from labkit.nn.model import batch, build, local_batch
from labkit.training.meta_init import built
from labkit.training.train import make_optimizer
from labkit.training.wrap import autocast


def _data(config, ctx, micro_batch, step, seed=0):
    x, y = batch(config, micro_batch * ctx.world_size, step, seed,
                 device=ctx.device)
    return local_batch(x, y, ctx.rank, ctx.world_size)


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
    the planner chose: its recompute, then ``wrap`` with its precision,
    on a GPU built on meta and materialised sharded (the run of ``train``
    builds the same; the dry run calls this)."""
    model = built(lambda: build(config), strategy, ctx, bf16=bf16,
                  recompute=recompute_mode)
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
    from labkit.predict.zero import ZeroConfig
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
