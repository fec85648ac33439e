"""``python -m labkit.runs.optimizers``: see the package's docstring.

    torchrun --nproc-per-node 2 -m labkit.runs.optimizers --steps 8
"""
from __future__ import annotations

import argparse
import contextlib
import time

import torch

from labkit import dist
from labkit.measure.collectives import CollectiveCounter
from labkit.measure.optimizers import state_bytes, state_kinds
from labkit.nn.model import (add_shape_arguments, batch, build,
                             check_shardable, config_from_args, local_batch)
from labkit.predict.optimizers import MUON_MODES, OPTIMIZERS
from labkit.training.optimizers import make
from labkit.training.train import mean_over_ranks
from labkit.training.wrap import wrap


def train(name, config, ctx, a, mode=None) -> dict:
    """One run: ``name``'s optimizers over the sharded model."""
    model = wrap(build(config, a.seed), "fsdp2_full", ctx)
    opts = make(name, model, mode)
    losses, counted, t0 = [], None, time.perf_counter()
    for step in range(a.steps):
        x, y = local_batch(*batch(config, a.batch, step, a.seed,
                                  device=ctx.device),
                           ctx.rank, ctx.world_size)
        loss = model(x, y)
        loss.backward()
        last = step == a.steps - 1
        counter = CollectiveCounter() if last else None
        with counter or contextlib.nullcontext():
            for opt in opts:
                opt.step()
        counted = counter.summary() if last else counted
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        losses.append(mean_over_ranks(loss))
    out = {"optimizer": name, "mode": mode, "losses": losses,
           "state": state_bytes(opts), "state_kinds": state_kinds(opts),
           "collectives": counted, "seconds": time.perf_counter() - t0}
    full = {n: p.full_tensor().cpu()
            for n, p in model.named_parameters()}
    del model, opts
    dist.release(ctx)
    return out, full


def reference(config, a) -> dict:
    """Muon and AdamW in one process, on the whole batch."""
    model = build(config, a.seed)
    opts = make("muon", model)
    for step in range(a.steps):
        x, y = batch(config, a.batch, step, a.seed)
        model(x, y).backward()
        for opt in opts:
            opt.step()
            opt.zero_grad(set_to_none=True)
    return {n: p.detach() for n, p in model.named_parameters()}


def main(argv=None):
    p = argparse.ArgumentParser(description="optimizers under FSDP2")
    p.add_argument("--optimizers", default=",".join(OPTIMIZERS))
    p.add_argument("--muon-modes", default=",".join(MUON_MODES))
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=8, help="global batch")
    p.add_argument("--reference", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    add_shape_arguments(p)
    a = p.parse_args(argv)
    names = a.optimizers.split(",")
    modes = [m for m in a.muon_modes.split(",") if m]
    bad = [n for n in names if n not in OPTIMIZERS] + \
        [m for m in modes if m not in MUON_MODES]
    if bad:
        p.error(f"unknown optimizers or Muon modes {bad}")
    config = config_from_args(a)
    ctx = dist.init()
    check_shardable(config, ctx.world_size)
    jobs = [(n, None) for n in names] + [("muon", m) for m in modes]
    ref = reference(config, a) if a.reference and ctx.rank == 0 else None
    runs = {}
    for name, mode in jobs:
        out, full = train(name, config, ctx, a, mode)
        if ref is not None and name == "muon":
            out["max_abs_diff"] = max(
                (full[n] - ref[n]).abs().max().item() for n in ref)
        runs[name if mode is None else f"muon_{mode}"] = out
    dist.save(ctx, {"config": vars(a), "runs": runs})
    dist.close()


if __name__ == "__main__":
    main()
