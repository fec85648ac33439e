"""One training step of one fake rank, counted (the dry run's engine).

    report = dry_step(case)     # a labkit.dryrun.labs.Case

Inside :func:`labkit.dryrun.fake.fake_world` the case builds its model the
way its run module does and returns its optimizer and a step function.
The optimizer's state is first created by the optimizer itself (a step on
zero gradients), so the counted step is a steady one: weights, Adam's
moments, then gradients and activations on top -- the step that sets a
GPU's peak from the second iteration on.
"""
from __future__ import annotations

import gc

import torch

from labkit.training import train
from labkit.dryrun.account import Tracker
from labkit.dryrun.fake import fake_world, rank_context


def warm_optimizer(model, optimizer) -> None:
    """Let the optimizer create its state, then drop the gradients."""
    if optimizer is None:
        return
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def counted_step(case, ctx) -> dict:
    """Build, warm and count one step of ``case`` on ``ctx`` (any tensors)."""
    tracker = Tracker()
    with tracker:  # from the first allocation: model, wrapper, buckets
        model, optimizer, step = case.setup(ctx)
        warm_optimizer(model, optimizer)
        tracker.begin(model, optimizer)
        step(tracker)
    out = tracker.report()
    del model, optimizer, step, tracker
    gc.collect()
    return out


def dry_step(case) -> dict:
    """``counted_step`` on fake tensors as rank ``case.rank``."""
    saved = train.FUSED
    train.FUSED = True  # the fake ranks stand for CUDA ranks
    try:
        with fake_world(case.world_size, case.rank):
            return counted_step(case, rank_context(case.world_size,
                                                   case.rank))
    finally:
        train.FUSED = saved
