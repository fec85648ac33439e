"""Train the tiny GPT under several data-parallel strategies; measure bytes.

    torchrun --nproc-per-node 2 -m labkit.runs.memory \
        --strategies ddp,fsdp2_full,fsdp2_grad_op --steps 3

One launch measures every strategy in turn (same seed, same batches), so the
lab pays the start-up cost of torchrun once. For each strategy and rank it
records:

- ``losses``: the global-batch loss of every step (compare with
  :func:`labkit.train.reference_losses`);
- ``after_forward_unsharded``: bytes of FSDP's gathered weights still
  allocated between forward and backward of the last step (0 when each unit
  was resharded after its forward; the whole model for SHARD_GRAD_OP);
- ``states``: parameters, gradients and optimizer state held after the last
  optimizer step (:func:`labkit.measure.memory.model_state_bytes`);
- ``peak``: :func:`labkit.device.peak_bytes` over the run: the CUDA
  allocator's ``max_memory_allocated`` on a GPU; on CPU its twin, the byte
  ledger measured here (model states + gathered weights), labelled so.
"""
from __future__ import annotations

import argparse
import time

from labkit import device as D
from labkit import dist
from labkit.measure.memory import model_state_bytes, unsharded_param_bytes
from labkit.model import (add_shape_arguments, batch, build, config_from_args,
                         count_params, GPTConfig, local_batch)
from labkit.train import make_optimizer, mean_over_ranks
from labkit.wrap import STRATEGIES, autocast, wrap


def run_strategy(strategy: str, config: GPTConfig, ctx, steps: int,
                 batch_size: int, bf16: bool, seed: int) -> dict:
    model = wrap(build(config, seed), strategy, ctx, bf16=bf16)
    opt = make_optimizer(model)
    amp = autocast(ctx, strategy, bf16)
    D.reset_peak(ctx.device)
    losses, unsharded = [], None
    t0 = time.perf_counter()
    for step in range(steps):
        x, y = local_batch(*batch(config, batch_size, step, seed,
                                  device=ctx.device), ctx.rank, ctx.world_size)
        opt.zero_grad(set_to_none=True)
        with amp:
            loss = model(x, y)
        unsharded = unsharded_param_bytes(model)  # between fwd and bwd
        loss.backward()
        opt.step()
        losses.append(mean_over_ranks(loss))
    D.sync(ctx.device)
    seconds = time.perf_counter() - t0
    states = model_state_bytes(model, opt)
    out = {"strategy": strategy, "losses": losses,
           "after_forward_unsharded": unsharded, "states": states,
           "peak": D.peak_bytes(ctx.device, states["total"] + unsharded),
           "seconds": seconds}
    del model, opt
    dist.release(ctx)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--strategies", default="ddp,fsdp2_full,fsdp2_grad_op")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=8, help="global batch")
    add_shape_arguments(p)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    strategies = a.strategies.split(",")
    bad = [s for s in strategies if s not in STRATEGIES]
    if bad:
        p.error(f"unknown strategies {bad}; choose from {STRATEGIES}")
    config = config_from_args(a)
    ctx = dist.init()
    n_params = count_params(build(config, a.seed))
    runs = [run_strategy(s, config, ctx, a.steps, a.batch, a.bf16, a.seed)
            for s in strategies]
    dist.save(ctx, {"params": n_params, "config": vars(a), "runs": runs,
                    "device": D.name(ctx.device)})
    dist.close()


if __name__ == "__main__":
    main()
