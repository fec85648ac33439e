"""Load a 4-rank FSDP2 checkpoint on another world size; save it other ways.

    torchrun --nproc-per-node 2 -m labkit.runs.tools.reshard \
        --ckpt _build/checkpoints/resume/reference/step-000008 \
        --out _build/checkpoints/resume/reshard --steps 8

Resharding: every rank builds the tiny GPT, shards it with FSDP2 over
*this* world size and ``dcp.load``s the checkpoint; DCP reads, for each
rank, the pieces of the saved chunks that overlap its new shard (the
global shapes are in ``.metadata``). The run records the next batch's loss
(the saved run's ``next_loss``) and rank 0 saves the gathered full weights
to ``params-<world size>.pt``. :func:`load_plain` does the same in one
process into a plain ``nn.Module`` (no process group).

Then, for chapter 8's bytes and times: DDP trains one step and rank 0
``torch.save``s the full model and optimizer state (``ddp-full.pt``); the
loaded FSDP2 state is saved with ``dcp.save`` and with ``dcp.async_save``,
and the seconds each call blocks training are recorded. ``--deepspeed``:
DeepSpeed ZeRO-3 trains one step and ``save_checkpoint``s (one model- and
one optimizer-state file per rank), and rank 0 rebuilds the full fp32
model with ``zero_to_fp32`` (``zero_to_fp32.pt``).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.distributed as tdist
import torch.distributed.checkpoint as dcp

from labkit import dist
from labkit.checkpoint import META, check_meta, require_under_build
from labkit.nn.model import (add_shape_arguments, build, check_shardable,
                             config_from_args, local_batch)
from labkit.runs.checkpoint import Sampler, load, probe, save
from labkit.training.train import make_optimizer, train_step
from labkit.training.wrap import wrap


def load_plain(folder: str | Path, config, batch: int = 8,
               dataset: int = 32, seed: int = 0):
    """One process, no process group: (plain model, next batch's loss)."""
    check_meta(Path(folder), dict(vars(config)))
    model = build(config, seed)
    sampler = Sampler(config, dataset, batch, seed)
    state = {"model": model.state_dict(),
             "trainer": {"sampler": sampler.state_dict()}}
    dcp.load(state, checkpoint_id=str(folder))
    model.load_state_dict(state["model"])
    sampler.load_state_dict(state["trainer"]["sampler"])
    with torch.no_grad():
        return model, model(*sampler.next()).item()


def ddp_full_save(config, ctx, a, out: Path) -> dict:
    """DDP's checkpoint: rank 0 writes the whole model and optimizer."""
    model = wrap(build(config, a.seed), "ddp", ctx)
    opt = make_optimizer(model)
    sampler = Sampler(config, a.dataset, a.batch, a.seed)
    x, y = local_batch(*sampler.next(), ctx.rank, ctx.world_size)
    train_step(model, opt, x.to(ctx.device), y.to(ctx.device))
    path, seconds = out / "ddp-full.pt", 0.0
    if ctx.rank == 0:
        t0 = time.perf_counter()
        torch.save({"model": model.module.state_dict(),
                    "optim": opt.state_dict()}, path)
        seconds = time.perf_counter() - t0
    tdist.barrier()
    del model, opt
    return {"path": str(path), "seconds": seconds}


def deepspeed_zero3_save(config, ctx, a, out: Path) -> dict:
    """DeepSpeed ZeRO-3 trains one step and saves; rank 0 then rebuilds
    the full fp32 weights with ``zero_to_fp32`` (what its script does)."""
    import deepspeed
    from deepspeed.utils.zero_to_fp32 import (
        get_fp32_state_dict_from_zero_checkpoint)
    from labkit.runs.zero import skip_shm_op
    from labkit.predict.zero import variant

    if not ctx.is_cuda:
        skip_shm_op()     # nothing to compile on CPU (lab 4)
    # no persistent small parameters: every weight is partitioned
    cfg = variant("zero3_persist0", world_size=ctx.world_size,
                  micro_batch=a.batch // ctx.world_size)
    model = build(config, a.seed)
    engine, *_ = deepspeed.initialize(model=model,
                                      optimizer=make_optimizer(model),
                                      config=cfg.to_json())
    sampler = Sampler(config, a.dataset, a.batch, a.seed)
    x, y = local_batch(*sampler.next(), ctx.rank, ctx.world_size)
    engine.backward(engine(x.to(ctx.device), y.to(ctx.device)))
    engine.step()
    folder = out / "deepspeed"
    engine.save_checkpoint(str(folder), tag="step-000001",
                           save_latest=False)
    tdist.barrier()
    fp32 = {}
    if ctx.rank == 0:
        full = get_fp32_state_dict_from_zero_checkpoint(
            str(folder), tag="step-000001")
        torch.save(full, out / "zero_to_fp32.pt")
        fp32 = {"bytes": sum(t.numel() * t.element_size()
                             for t in full.values())}
    getattr(engine, "destroy", lambda: None)()
    del engine, model
    dist.release(ctx)
    return {"folder": str(folder / "step-000001"), "zero_to_fp32": fp32}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ckpt", required=True, help="a step-NNNNNN folder")
    p.add_argument("--out", required=True, help="folder for new files")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--dataset", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout-s", type=float, default=60.0)
    p.add_argument("--deepspeed", action="store_true",
                   help="also save with DeepSpeed ZeRO-3 and zero_to_fp32")
    add_shape_arguments(p)
    a = p.parse_args(argv)
    config = config_from_args(a)
    ckpt = Path(a.ckpt)
    out = require_under_build(a.out)
    if not (ckpt / META).exists():
        p.error(f"{ckpt} is not a complete checkpoint (no {META})")
    ctx = dist.init(timeout_s=a.timeout_s)
    check_shardable(config, ctx.world_size)
    if ctx.rank == 0:
        out.mkdir(parents=True, exist_ok=True)
    tdist.barrier()
    meta = {"model": dict(vars(config)), "world_size": ctx.world_size}
    model = wrap(build(config, a.seed), "fsdp2_full", ctx)
    opt = make_optimizer(model)
    sampler = Sampler(config, a.dataset, a.batch, a.seed)
    step = load(ckpt, model, opt, sampler, meta)
    next_loss = probe(model, sampler, ctx, out)
    saves = {kind: save(out / kind, model, opt, sampler, step, ctx, meta,
                        async_save=kind == "async")
             for kind in ("sync", "async")}
    del model, opt
    dist.release(ctx)
    ddp = ddp_full_save(config, ctx, a, out)
    ds = deepspeed_zero3_save(config, ctx, a, out) if a.deepspeed else None
    dist.save(ctx, {"step": step, "next_loss": next_loss, "saves": saves,
                    "ddp": ddp, "deepspeed": ds, "config": vars(a)})
    dist.close()


if __name__ == "__main__":
    main()
