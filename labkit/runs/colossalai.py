"""Train the tiny GPT through Colossal-AI's Booster, one plugin after another.

    make colossalai     # once: .venv-colossalai (torch 2.5.1, colossalai 0.5.0)
    PYTHONPATH=. .venv-colossalai/bin/torchrun --nproc-per-node 2 \
        -m labkit.runs.colossalai \
        --plugins torch_ddp,low_level_zero_1,low_level_zero_2,torch_fsdp

Runs in Colossal-AI's own environment (it pins torch<=2.5.1); the lab's
kernel stays in ``.venv`` and starts these ranks with
``labkit.launch.launch(..., python=".venv-colossalai/bin/python")``.

For every plugin the course's GPT (``labkit.nn.model``) trains ``--steps``
steps from the same seed on the same batches as the single-process
reference (``labkit.training.train``), with the same Adam. The last step is measured:
the collectives it issues (``labkit.measure.collectives``) and, at the end
of backward, the bytes the rank holds, counted storage by storage in
Colossal-AI's own structures: the working parameters and their gradients,
LowLevelZero's gradient store and fp32 master shards, and the inner Adam's
states. ``--time-steps K`` (GPU) times K more steps and reads the CUDA
peak. Patches of CUDA-only calls live in ``labkit.runs.cai.patches``;
each record lists the ones its plugin needed.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch

from labkit import device, dist
from labkit.measure.collectives import CollectiveCounter
from labkit.measure.memory import unique_bytes
from labkit.nn.model import (add_shape_arguments, build, config_from_args,
                             count_params, rank_batches, sharding_units)
from labkit.runs.cai.patches import NEEDS, apply
from labkit.training.train import LR, make_optimizer, mean_over_ranks

# HybridParallelPlugin needs a shardformer policy: labkit.runs.cai.hybrid
PLUGINS = tuple(p for p in NEEDS if not p.startswith("hybrid_"))


def plugin_list(parser, text: str, known) -> list[str]:
    """``--plugins a,b`` as a list; an unknown name exits before any work."""
    plugins = [s for s in text.split(",") if s]
    bad = [s for s in plugins if s not in known]
    if bad:
        parser.error(f"unknown plugins {bad}; choose from {known}")
    return plugins


def start(seed: int):
    """Colossal-AI's launch (gloo on CPU), then labkit's context."""
    import colossalai
    colossalai.launch_from_torch(seed=seed, verbose=False)
    return dist.init()


def make_plugin(name: str, bf16: bool, cuda: bool):
    from colossalai.booster import plugin as P
    precision = "bf16" if bf16 else "fp32"
    if name == "torch_ddp":
        return P.TorchDDPPlugin()
    if name.startswith("low_level_zero_"):
        # overlap_communication needs a side stream: a GPU only
        return P.LowLevelZeroPlugin(stage=int(name[-1]), precision=precision,
                                    overlap_communication=cuda)
    if name == "torch_fsdp":
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        from labkit.nn.model import Block, Embeddings, Head
        # one FSDP unit per labkit.nn.model.sharding_units, as lab 3 wraps
        return P.TorchFSDPPlugin(
            auto_wrap_policy=ModuleWrapPolicy({Embeddings, Block, Head}))
    if name == "gemini":
        return P.GeminiPlugin(precision=precision if bf16 else "fp16")
    raise ValueError(f"unknown plugin {name!r}: choose from {PLUGINS}")


def state_bytes(model, optimizer) -> dict:
    """Model-state bytes this rank holds, by where Colossal-AI keeps them."""
    inner = getattr(optimizer, "optim", optimizer)   # the torch Adam
    params = list(model.parameters())
    states, counters = [], []
    for st in inner.state.values():
        for k, v in st.items():
            if isinstance(v, torch.Tensor):
                (counters if k == "step" else states).append(v)
    store = []   # LowLevelZero: reduced gradient slices, by process group
    for gs in getattr(optimizer, "pg_to_grad_store", {}).values():
        for group in gs._grads_of_params.values():
            for slices in group.values():
                store += list(slices)
    master = list(getattr(optimizer, "working_to_master_param", {}).values())
    working = {id(p) for p in params}
    return {"params": unique_bytes(params),
            "grads": unique_bytes(p.grad for p in params),
            "grad_store": unique_bytes(store),
            "master": unique_bytes(m for m in master
                                   if id(m) not in working),
            "optimizer": unique_bytes(states),
            "optimizer_counters": unique_bytes(counters)}


def run_plugin(name: str, config, ctx, a) -> dict:
    from colossalai.booster import Booster

    patches = apply(name)
    device.reset_peak(ctx.device)
    booster = Booster(plugin=make_plugin(name, a.bf16, ctx.is_cuda))
    model, opt, *_ = _boost(booster, name, config, a)
    losses, measured, counter = [], None, None
    data = rank_batches(config, a.batch, ctx, a.steps + a.time_steps, a.seed)
    times = []
    for step, (x, y) in enumerate(data):
        last = step == a.steps - 1
        dist.sync(ctx)
        t0 = time.perf_counter()
        with CollectiveCounter() if last else contextlib.nullcontext() as c:
            opt.zero_grad()
            loss = model(x, y)
            booster.backward(loss, opt)
            if last and name != "gemini":  # Gemini: bytes live in chunks
                measured = state_bytes(model, opt)
            opt.step()
            dist.sync(ctx)
        if step >= a.steps:
            times.append(time.perf_counter() - t0)
        else:
            losses.append(mean_over_ranks(loss))  # outside the counter
        if last:
            counter = c
    out = {"plugin": name, "patches": patches, "losses": losses,
           "bytes_end_of_backward": measured, "comm": counter.summary(),
           "comm_records": counter.records,
           "optimizer_class": type(opt).__name__}
    if times:
        out["step_s"] = statistics.median(times)
        out["tokens_per_s"] = a.batch * config.seq / out["step_s"]
    # CUDA's allocator peak; None on CPU (no allocator statistics there)
    out["max_memory_allocated"] = device.peak_bytes(ctx.device)["bytes"]
    del model, opt, booster
    dist.release(ctx)
    return out


def _boost(booster, name: str, config, a):
    model = build(config, a.seed)
    if name == "gemini":  # GeminiOptimizer accepts only its own Adams
        from colossalai.nn.optimizer import HybridAdam
        # adamw_mode=False, no weight decay: the Adam of labkit.training.train
        return booster.boost(model, HybridAdam(model.parameters(), lr=LR,
                                               adamw_mode=False))
    return booster.boost(model, make_optimizer(model))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--plugins", default="torch_ddp,low_level_zero_1,"
                   "low_level_zero_2,torch_fsdp")
    p.add_argument("--steps", type=int, default=3,
                   help="trained steps; the last one is measured")
    p.add_argument("--time-steps", type=int, default=0,
                   help="more steps, timed (GPU profile)")
    p.add_argument("--batch", type=int, default=8, help="global batch")
    add_shape_arguments(p)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    plugins = plugin_list(p, a.plugins, PLUGINS)
    if a.steps < 2 or a.time_steps < 0:
        p.error("--steps must be >= 2 (Adam's states exist after the first)"
                " and --time-steps >= 0")
    config = config_from_args(a)
    import colossalai
    t0 = time.perf_counter()
    ctx = start(a.seed)
    model = build(config, a.seed)
    units = [[list(q.shape) for q in u.parameters()]
             for u in sharding_units(model)]
    runs = {s: run_plugin(s, config, ctx, a) for s in plugins}
    dist.save(ctx, {"params": count_params(model), "unit_shapes": units,
                    "runs": runs, "train_s": time.perf_counter() - t0,
                    "colossalai_version": colossalai.__version__,
                    "torch_version": torch.__version__,
                    "device": device.name(ctx.device)})
    dist.close()


if __name__ == "__main__":
    main()
