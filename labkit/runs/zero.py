"""Train the tiny GPT with DeepSpeed ZeRO-0..3 and offload; count its bytes.

    torchrun --nproc-per-node 2 -m labkit.runs.zero \
        --variants zero0,zero1,zero2,zero3,zero3_offload_params \
        --steps 3 --fsdp fsdp2_full --reference --torch-zero1

    # the same with DeepSpeed's own launcher (it passes --local_rank)
    deepspeed --num_gpus 2 --module labkit.runs.zero --variants zero3

For each variant (a name from ``labkit.predict.zero.VARIANTS``) every rank
builds the same model from the same seed, hands it to
``deepspeed.initialize`` with the JSON of its :class:`ZeroConfig` and a
plain ``torch.optim.Adam`` (``labkit.training.train.make_optimizer``), and trains
``--steps`` steps on the same batches as the single-process reference
(``labkit.training.train.reference_losses``). On the last step it records:

- the model-state bytes at the end of backward, before DeepSpeed's final
  gradient reduction (``measure.zero.at_end_of_backward``): the moment the
  most gradient bytes are alive, and what the ledger counts;
- the same after the optimizer step (what stays between steps);
- every collective of the step (``measure.collectives.CollectiveCounter``).

``--fsdp`` trains ``labkit.training.wrap`` strategies with the same loop, for the
comparison; ``--reference`` makes rank 0 also run the single-process
reference. ``--time-steps K`` times K more steps of each run without the
counter. Every run reports ``peak`` (:func:`labkit.device.peak_bytes`: the
CUDA allocator's ``max_memory_allocated`` on a GPU, the byte ledger on CPU).

DeepSpeed on CPU compiles one C++ op the first time a process group is set
up (``deepspeed_shm_comm``, used only by its inference all-reduce); this
module tells DeepSpeed it is unavailable (:func:`skip_shm_op`), so a run
compiles nothing. ``LABKIT_DS_SHM=1`` lets DeepSpeed build it (cached under
``TORCH_EXTENSIONS_DIR``, which ``labkit.launch`` points at ``.cache/``).
"""
from __future__ import annotations

import argparse
import os
import time
from contextlib import nullcontext

import torch

from labkit import device as D
from labkit import dist
from labkit.measure.collectives import CollectiveCounter
from labkit.nn.model import (add_shape_arguments, build, config_from_args,
                             count_params, GPTConfig, rank_batches)
from labkit.training.train import (LR, make_optimizer, mean_over_ranks,
                                   reference_losses, timed_steps, train_step)
from labkit.predict.zero import VARIANTS, ZeroConfig, variant


def skip_shm_op() -> bool:
    """Keep DeepSpeed from JIT-compiling its shared-memory comm op on CPU.

    ``deepspeed.comm.torch.TorchBackend`` builds ``deepspeed_shm_comm``
    when ``deepspeed.ops.__compatible_ops__`` says it can; training never
    uses it (only ``inference_all_reduce`` does). Marking it incompatible
    is DeepSpeed's own switch for an op a machine cannot build. Returns
    True when the op was switched off.
    """
    if os.environ.get("LABKIT_DS_SHM") == "1":
        return False
    import deepspeed.ops
    ops = deepspeed.ops.__compatible_ops__
    ops["deepspeed_shm_comm"] = False
    return True


def zero_config(name: str, a, ctx) -> ZeroConfig:
    """The variant, sized for this launch and the command line's knobs."""
    over = dict(world_size=ctx.world_size,
                micro_batch=a.batch // ctx.world_size,
                precision="bf16" if a.bf16 else "fp32", lr=LR)
    if "gradient_clipping" not in VARIANTS[name]:  # the variant's wins
        over["gradient_clipping"] = a.gradient_clipping
    if a.reduce_bucket_size:
        over["reduce_bucket_size"] = a.reduce_bucket_size
    if a.nvme_path:
        over["nvme_path"] = a.nvme_path
    if a.pin_memory:
        over["pin_memory"] = True
    return variant(name, **over)


def engine_model(config: GPTConfig, cfg: ZeroConfig, ctx, seed: int):
    """The model handed to ``deepspeed.initialize``, on the rank's device.

    DeepSpeed moves the module to the GPU itself (``engine.py``,
    ``_configure_distributed_model``: ``self.module.to(self.device)``),
    but the client optimizer is built before that, and ``make_optimizer``
    picks fused Adam only for parameters already on CUDA: built on the
    CPU model, every GPU run stepped with the per-parameter loop. So the
    model goes to the device first -- the same bytes DeepSpeed would put
    there a moment later. Offloaded optimizers stay as built on the CPU:
    their step runs on CPU partitions (torch's per-parameter loop).
    """
    model = build(config, seed)
    if cfg.offload_optimizer == "none":
        model = model.to(ctx.device)
    return model


def run_deepspeed(name: str, config: GPTConfig, ctx, a) -> dict:
    import deepspeed
    from labkit.measure.zero.state import (at_end_of_backward, flat,
                                           state_bytes)

    cfg = zero_config(name, a, ctx)
    ds_json = cfg.to_json()
    if a.grad_accum_dtype and cfg.stage:   # bf16 + fp32 at ZeRO-1:
        # BF16_Optimizer. DeepSpeed 0.19.8 refuses it at ZeRO-0.
        ds_json["data_types"] = {"grad_accum_dtype": a.grad_accum_dtype}
    model = engine_model(config, cfg, ctx, a.seed)
    optimizer = None if cfg.optimizer == "deepspeed" else make_optimizer(model)
    D.reset_peak(ctx.device)
    t0 = time.perf_counter()
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer,
                                      config=ds_json)
    init_s = time.perf_counter() - t0
    losses, snapshots = [], {}
    batches = rank_batches(config, a.batch, ctx, a.steps, a.seed)
    for step, (x, y) in enumerate(batches):
        last = step == len(batches) - 1
        undo = None
        if last:  # count bytes at the end of backward of the last step
            undo = at_end_of_backward(engine, lambda: snapshots.setdefault(
                "end_of_backward", state_bytes(engine)))
        dist.sync(ctx)
        with CollectiveCounter() if last else nullcontext() as counter:
            loss = engine(x, y)
            engine.backward(loss)
            if last:
                snapshots["after_backward"] = state_bytes(engine)
            engine.step()
            dist.sync(ctx)
        if undo:
            undo()
        losses.append(mean_over_ranks(loss))
    out = {"name": name, "engine": "deepspeed", "config": cfg.asdict(),
           "ds_config": ds_json, "losses": losses, "init_s": init_s,
           "optimizer_class": type(engine.optimizer).__name__,
           # the dtype DeepSpeed accumulates gradients in (get_data_types)
           "grad_accum_dtype": str(engine.get_data_types()[1]).replace(
               "torch.", "").replace("float32", "fp32").replace(
               "bfloat16", "bf16").replace("float16", "fp16"),
           "gradient_clipping": engine.gradient_clipping(),
           "comm": counter.summary(), "comm_records": counter.records}
    for k, snap in snapshots.items():
        out[f"bytes_{k}"] = flat(snap)
        out[f"by_attribute_{k}"] = snap["by_attribute"]
    out["bytes_after_step"] = flat(state_bytes(engine))
    if a.time_steps:
        out.update(timed_steps(lambda x, y: (engine.backward(engine(x, y)),
                                             engine.step()),
                               config, ctx, a.batch, a.steps, a.time_steps,
                               a.seed))
    out["peak"] = D.peak_bytes(ctx.device,  # the ledger's twin on CPU
                               out["bytes_end_of_backward"]["total"])
    destroy = getattr(engine, "destroy", None)
    if callable(destroy):
        destroy()
    del engine, model, optimizer
    dist.release(ctx)
    return out


def run_fsdp(strategy: str, config: GPTConfig, ctx, a) -> dict:
    """The same loop with a ``labkit.training.wrap`` strategy (FSDP or DDP)."""
    from labkit.measure.memory import model_state_bytes
    from labkit.training.wrap import autocast, wrap

    D.reset_peak(ctx.device)
    model = wrap(build(config, a.seed), strategy, ctx, bf16=a.bf16)
    opt = make_optimizer(model)
    amp = autocast(ctx, strategy, a.bf16)
    losses = []
    batches = rank_batches(config, a.batch, ctx, a.steps, a.seed)
    measured = None
    for step, (x, y) in enumerate(batches):
        last = step == len(batches) - 1
        dist.sync(ctx)
        with CollectiveCounter() if last else nullcontext() as counter:
            opt.zero_grad(set_to_none=True)
            with amp:
                loss = model(x, y)
            loss.backward()
            if last:
                measured = model_state_bytes(model, opt)
            opt.step()
            dist.sync(ctx)
        losses.append(mean_over_ranks(loss))
    out = {"name": strategy, "engine": "torch", "losses": losses,
           "bytes_end_of_backward": measured, "comm": counter.summary(),
           "comm_records": counter.records}

    if a.time_steps:
        out.update(timed_steps(
            lambda x, y: train_step(model, opt, x, y, amp), config, ctx,
            a.batch, a.steps, a.time_steps, a.seed))
    out["peak"] = D.peak_bytes(ctx.device, measured["total"])
    del model, opt
    dist.release(ctx)
    return out


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variants", default="zero0,zero1,zero2,zero3",
                   help=f"comma-separated, from: {', '.join(VARIANTS)}")
    p.add_argument("--fsdp", default="",
                   help="comma-separated labkit.training.wrap strategies to compare")
    p.add_argument("--torch-zero1", action="store_true",
                   help="also DDP + torch's ZeroRedundancyOptimizer")
    p.add_argument("--reference", action="store_true",
                   help="rank 0 also trains the single-process reference")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--time-steps", type=int, default=0)
    p.add_argument("--batch", type=int, default=8, help="global batch")
    p.add_argument("--seed", type=int, default=0)
    add_shape_arguments(p)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--gradient-clipping", type=float, default=0.0)
    p.add_argument("--reduce-bucket-size", type=int, default=0,
                   help="elements; 0 keeps each variant's value")
    p.add_argument("--nvme-path", default="")
    p.add_argument("--grad-accum-dtype", default="",
                   choices=("", "fp32", "bf16", "fp16"),
                   help="DeepSpeed's data_types.grad_accum_dtype for "
                        "ZeRO-1..3 (empty: its default)")
    p.add_argument("--pin-memory", action="store_true")
    # DeepSpeed's launcher appends --local_rank=N (LOCAL_RANK is set too)
    p.add_argument("--local_rank", "--local-rank", type=int, default=None,
                   help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.variants = [v for v in a.variants.split(",") if v]
    a.fsdp = [s for s in a.fsdp.split(",") if s]
    for v in a.variants:
        if v not in VARIANTS:
            p.error(f"unknown variant {v!r}; known: {', '.join(VARIANTS)}")
    if a.steps < 1:
        p.error("--steps must be >= 1")
    return a


def main(argv=None) -> None:
    a = parse_args(argv)
    config = config_from_args(a)
    ctx = dist.init()
    if a.batch % ctx.world_size:
        raise ValueError(f"global batch {a.batch} does not divide by "
                         f"world size {ctx.world_size}")
    shm_skipped = skip_shm_op() if not ctx.is_cuda else False
    if a.fsdp:
        from labkit.training.wrap import check_strategy
        for s in a.fsdp:
            check_strategy(s, ctx.world_size)
    probe = build(config, a.seed)
    from labkit.measure.zero.estimators import largest_layer_params
    record = {"params": count_params(probe),
              "param_numels": [p.numel() for p in probe.parameters()],
              # the token embeddings' input (token ids) needs no gradient
              "no_grad_input_numels": [p.numel()
                                       for p in probe.embed.parameters()],
              "largest_layer_params": largest_layer_params(probe),
              "model": vars(config), "steps": a.steps, "batch": a.batch,
              "bf16": a.bf16, "shm_op_skipped": shm_skipped,
              "device": D.name(ctx.device),
              "torch_extensions_dir": os.environ.get("TORCH_EXTENSIONS_DIR"),
              "runs": {}}
    del probe
    t0 = time.perf_counter()
    for name in a.variants:
        record["runs"][name] = run_deepspeed(name, config, ctx, a)
    for s in a.fsdp:
        record["runs"][s] = run_fsdp(s, config, ctx, a)
    if a.torch_zero1:   # PyTorch's ZeRO-1, beside DeepSpeed's stage 1
        from labkit.runs.blocks.zero_redundancy import run_torch_zero1
        record["runs"]["torch_zero1"] = run_torch_zero1(config, ctx, a)
    record["train_s"] = time.perf_counter() - t0
    if a.reference and ctx.rank == 0:
        record["reference"] = reference_losses(config, a.steps, a.batch,
                                               a.seed)
    import deepspeed
    record["deepspeed_version"] = deepspeed.__version__
    dist.save(ctx, record)
    dist.close()


if __name__ == "__main__":
    main()
