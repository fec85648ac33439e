"""Train the tiny GPT under several data-parallel strategies; measure bytes.

    torchrun --nproc-per-node 2 -m labkit.runs.memory \
        --strategies ddp,fsdp2_full,fsdp2_grad_op --steps 3
    torchrun --nproc-per-node 2 -m labkit.runs.memory --arch llama

``--arch llama`` trains the Llama-style block (GQA, SwiGLU, RMSNorm, RoPE)
at the same layers, hidden, heads, vocabulary and sequence.

One launch measures every strategy in turn (same seed, same batches), so the
lab pays the start-up cost of torchrun once. For each strategy and rank it
records:

- ``losses``: the global-batch loss of every step (compare with
  :func:`labkit.training.train.reference_losses`);
- ``after_forward_unsharded``: bytes of FSDP's gathered weights still
  allocated between forward and backward of the last step (0 when each unit
  was resharded after its forward; the whole model for SHARD_GRAD_OP);
- ``states``: parameters, gradients and optimizer state held after the last
  optimizer step (:func:`labkit.measure.memory.model_state_bytes`);
- ``activations``: one block's activation bytes for this rank's
  micro-batch, without and with full recomputation (the record's ledger,
  :func:`labkit.predict.activations.arch.block_saved`, predicts them to
  the byte on CPU; Korthikanti et al. 2022 for the GPT block in 16-bit;
  :func:`measure_activations`);
- ``step_s``: each step's seconds (:class:`labkit.device.Timer`: CUDA
  events on a GPU), for tokens/s and MFU;
- ``peak``: :func:`labkit.device.peak_bytes` over the run: the CUDA
  allocator's ``max_memory_allocated`` on a GPU; on CPU its twin, the byte
  ledger measured here (model states + gathered weights), labelled so;
- ``peak_states``: that ledger on every device (model states after the
  step + the gathered weights between forward and backward, tensors
  counted): the quantity the model-state ledger predicts. On a GPU the
  allocator's ``peak`` also holds activations, logits, DDP's bucket copy of
  the gradients and autocast's weight copies, so lab 1 compares the ledger
  with ``peak_states`` and shows ``peak`` beside a floor that adds the
  activations (issue 17, defect 7).
"""
from __future__ import annotations

import argparse
import statistics
import time

from labkit import device as D
from labkit import dist
from labkit.measure.memory import (activation_bytes, model_state_bytes,
                                   unsharded_param_bytes)
from labkit.nn.model import (add_shape_arguments, batch, build,
                             config_from_args, count_params, GPTConfig,
                             local_batch)
from labkit.training.train import mean_over_ranks, setup
from labkit.training.wrap import STRATEGIES, autocast


def run_strategy(strategy: str, config: GPTConfig, ctx, steps: int,
                 batch_size: int, bf16: bool, seed: int) -> dict:
    model, opt, amp = setup(strategy, config, ctx, bf16, seed)
    D.reset_peak(ctx.device)
    losses, unsharded, step_s = [], None, []
    t0 = time.perf_counter()
    for step in range(steps):
        x, y = local_batch(*batch(config, batch_size, step, seed,
                                  device=ctx.device), ctx.rank, ctx.world_size)
        timer = D.Timer(ctx.device).start()  # CUDA events on a GPU
        opt.zero_grad(set_to_none=True)
        with amp:
            loss = model(x, y)
        unsharded = unsharded_param_bytes(model)  # between fwd and bwd
        loss.backward()
        opt.step()
        step_s.append(timer.stop())
        losses.append(mean_over_ranks(loss))
    D.sync(ctx.device)
    seconds = time.perf_counter() - t0
    states = model_state_bytes(model, opt)
    out = {"strategy": strategy, "losses": losses,
           "after_forward_unsharded": unsharded, "states": states,
           "peak": D.peak_bytes(ctx.device, states["total"] + unsharded),
           "peak_states": {"bytes": states["total"] + unsharded,
                           "source": "model states + gathered weights "
                                     "(tensors counted)"},
           "seconds": seconds, "step_s": step_s,
           # the first step builds buckets and caches: not a steady step
           "step_s_median": statistics.median(step_s[1:] or step_s)}
    del model, opt
    dist.release(ctx)
    return out


def measure_activations(config: GPTConfig, micro_batch: int, ctx,
                        bf16: bool, seed: int) -> dict:
    """One block of ``config``'s architecture (GPT or Llama-style): its
    activation bytes, without and with full recomputation
    (:func:`labkit.measure.memory.activation_bytes`, on this rank's device,
    under the bf16 autocast of the DDP path when ``bf16``)."""
    from labkit.nn.model import Block
    import torch
    torch.manual_seed(seed)
    block = Block(config).to(ctx.device)
    amp = autocast(ctx, "ddp", bf16)
    out = {"micro_batch": micro_batch, "arch": config.arch,
           "element_bytes": 2 if bf16 else 4}
    for name, rc in (("none", False), ("full", True)):
        out[name] = activation_bytes(block, micro_batch, config.seq,
                                     config.hidden, ctx.device, amp, rc)
    del block
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
    acts = measure_activations(config, a.batch // ctx.world_size, ctx,
                               a.bf16, a.seed)
    dist.save(ctx, {"params": n_params, "config": vars(a), "runs": runs,
                    "activations": acts,
                    "device": D.name(ctx.device)})
    dist.close()


if __name__ == "__main__":
    main()
