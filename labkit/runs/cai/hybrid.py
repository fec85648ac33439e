"""Colossal-AI's HybridParallelPlugin (tensor, pipeline) on the tiny GPT.

    make colossalai     # once: .venv-colossalai (torch 2.5.1, colossalai 0.5.0)
    PYTHONPATH=. .venv-colossalai/bin/torchrun --nproc-per-node 2 \
        -m labkit.runs.cai.hybrid --plugins hybrid_tp2,hybrid_pp2

HybridParallelPlugin shards a model through Colossal-AI's shardformer,
which needs a *policy* for the model class: it has one for Hugging Face's
GPT-2, not for ``labkit.nn.model.GPT``. So the model here is
``transformers.GPT2LMHeadModel`` built from a config (nothing downloaded)
with the tiny GPT's shape: same layers, hidden, heads, vocab, sequence,
MLP ratio 4, exact GELU, no dropout, an untied head, eager attention.
Its loss is Hugging Face's: ``labels = input_ids``, shifted inside.

Each rank first trains the same model alone, without collectives: the
single-process reference (same seed, same full batches, same Adam,
``labkit.training.train.make_optimizer``); then
every rank trains each plugin in turn: ``hybrid_tp2`` (tp_size=2,
Megatron-style tensor parallelism) and ``hybrid_pp2`` (pp_size=2, 1F1B
with ``--microbatches`` micro-batches). Settings: ``precision="fp32"`` (the
default is fp16), the rest Colossal-AI's defaults, stated here because
they decide what is measured: ``zero_stage=0`` (no ZeRO, so
``overlap_communication`` has nothing to overlap), ``max_norm=0`` (no
clipping), no fused kernels, no flash attention, no sequence parallelism,
``parallel_output=True`` (the head's logits stay split by vocabulary and
the loss is shardformer's ``dist_cross_entropy``),
``make_vocab_size_divisible_by=64`` (a vocabulary of 256 is not padded),
``overlap_p2p=True``. Each record holds the losses, the
parameters this rank holds (name, shape, bytes), and the patches of
CUDA-only calls it needed (``labkit.runs.cai.patches``).
"""
from __future__ import annotations

import argparse
import time

import torch

from labkit import dist
from labkit.measure.memory import unique_bytes
from labkit.nn.model import (GPTConfig, add_shape_arguments, batch,
                             config_from_args)
from labkit.runs.colossalai import plugin_list, start
from labkit.runs.cai.patches import apply
from labkit.training.train import make_optimizer

PLUGINS = ("hybrid_tp2", "hybrid_pp2")


def build_hf(config: GPTConfig, seed: int = 0, attn: str = "eager"):
    """GPT-2 with the tiny GPT's shape, the same weights on every rank."""
    from transformers import GPT2Config, GPT2LMHeadModel
    hf = GPT2Config(vocab_size=config.vocab, n_positions=config.seq,
                    n_embd=config.hidden, n_layer=config.layers,
                    n_head=config.heads,
                    n_inner=config.mlp_ratio * config.hidden,
                    activation_function="gelu", resid_pdrop=0.0,
                    embd_pdrop=0.0, attn_pdrop=0.0,
                    tie_word_embeddings=False, use_cache=False,
                    attn_implementation=attn)
    torch.manual_seed(seed)
    return GPT2LMHeadModel(hf)


def hf_batch(config: GPTConfig, batch_size: int, step: int, seed: int = 0,
             device="cpu"):
    """The global batch of ``labkit.nn.model.batch`` as Hugging Face inputs.

    An all-ones ``attention_mask`` (no padding): shardformer's GPT-2
    forward (``colossalai/shardformer/modeling/gpt2.py``,
    ``_get_attention_mask``) reads its size and fails without one.
    """
    x, _ = batch(config, batch_size, step, seed, device=device)
    return {"input_ids": x, "attention_mask": torch.ones_like(x),
            "labels": x}


def reference(config, steps, batch_size, seed=0, attn="eager"):
    """Losses of the same GPT-2 trained in one process on the full batch."""
    model = build_hf(config, seed, attn)
    opt = make_optimizer(model)
    losses = []
    for step in range(steps):
        opt.zero_grad()
        loss = model(**hf_batch(config, batch_size, step, seed)).loss
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def make_plugin(name: str, microbatches: int):
    from colossalai.booster.plugin import HybridParallelPlugin
    if name == "hybrid_tp2":
        return HybridParallelPlugin(tp_size=2, pp_size=1, precision="fp32")
    if name == "hybrid_pp2":
        return HybridParallelPlugin(tp_size=1, pp_size=2, precision="fp32",
                                    num_microbatches=microbatches)
    raise ValueError(f"unknown plugin {name!r}: choose from {PLUGINS}")


def run_plugin(name, config, ctx, a) -> dict:
    from colossalai.booster import Booster
    patches = apply(name)
    plugin = make_plugin(name, a.microbatches)
    booster = Booster(plugin=plugin)
    model = build_hf(config, a.seed, a.attn)
    model, opt, *_ = booster.boost(model, make_optimizer(model))
    losses = []
    for step in range(a.steps):
        data = hf_batch(config, a.batch, step, a.seed, ctx.device)
        opt.zero_grad()
        if name == "hybrid_pp2":
            out = booster.execute_pipeline(
                iter([data]), model, lambda o, _: o.loss, opt,
                return_loss=True)
            # the loss exists on the last stage; broadcast it
            last = ctx.world_size - 1
            t = (out["loss"].detach().clone() if ctx.rank == last
                 else torch.zeros((), device=ctx.device))
            torch.distributed.broadcast(t, src=last)
            loss = t.item()
        else:
            out = model(**data).loss
            booster.backward(out, opt)
            loss = out.item()
        opt.step()
        losses.append(loss)
    params = [(n, list(p.shape), p.numel() * p.element_size())
              for n, p in model.unwrap().named_parameters()]
    out = {"plugin": name, "patches": patches, "losses": losses,
           "params": params,
           "param_bytes": unique_bytes(model.unwrap().parameters()),
           "optimizer_class": type(opt).__name__}
    del model, opt, booster
    dist.release(ctx)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--plugins", default=",".join(PLUGINS))
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=8, help="global batch")
    p.add_argument("--microbatches", type=int, default=2)
    p.add_argument("--attn", default="eager", choices=("eager", "sdpa"))
    add_shape_arguments(p)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    plugins = plugin_list(p, a.plugins, PLUGINS)
    if a.steps < 1 or a.microbatches < 1 or a.batch % a.microbatches:
        p.error("--steps and --microbatches must be >= 1 and the batch "
                "must divide by --microbatches")
    config = config_from_args(a)
    import colossalai
    t0 = time.perf_counter()
    ctx = start(a.seed)
    ref = reference(config, a.steps, a.batch, a.seed, a.attn)
    full = build_hf(config, a.seed, a.attn)
    runs = {s: run_plugin(s, config, ctx, a) for s in plugins}
    dist.save(ctx, {"params": sum(q.numel() for q in full.parameters()),
                    "reference_losses": ref, "runs": runs,
                    "attn": a.attn, "train_s": time.perf_counter() - t0,
                    "colossalai_version": colossalai.__version__})
    dist.close()


if __name__ == "__main__":
    main()
