"""Build a model where it will live: on a GPU rank, never whole on the host.

    model = built(lambda: build(config), "fsdp2_full", ctx, bf16=True,
                  recompute="selective")

On a GPU rank (``ctx.device`` not the CPU) FSDP2's model is built on the
``meta`` device (shapes, no bytes), wrapped -- ``fully_shard`` shards the
meta parameters -- and then each rank materialises its shard only, on its
GPU (``to_empty``), and initialises it (the norms' ``reset_parameters``,
then :func:`labkit.nn.decoder.init_weights`): PyTorch's FSDP2 meta-device
initialisation (the ``fully_shard`` documentation; torchtitan builds its
models this way). DDP needs the whole model on every GPU: it is built
there directly. Without this, lab 12's 8 ranks each built the 6.7B model
in fp32 on the host before sharding it, 27 GB a rank, 215 GB a node at
once (issue 47); :func:`labkit.predict.fit_runs.host_bytes` predicts
both.

On the CPU (gloo ranks, the tests, the dry run's fake ranks) the model is
built as before, from the seed, so a CPU lab's weights and losses are
those of :func:`labkit.nn.model.build`. FSDP1 is built on the host too
(its own meta path needs ``param_init_fn``; no GPU profile runs it at a
size the host cannot hold).
"""
from __future__ import annotations

import torch
from torch import nn

from labkit.training.recompute import apply
from labkit.training.wrap import wrap


def on_meta(ctx, strategy: str) -> bool:
    """Whether ``strategy`` on ``ctx`` is built on the meta device."""
    return ctx.device.type != "cpu" and strategy.startswith("fsdp2")


def materialise(model: nn.Module, device) -> nn.Module:
    """Storage for the (sharded) meta parameters on ``device``, then the
    weights initialised as :class:`labkit.nn.decoder.Decoder` does."""
    from labkit.nn.decoder import init_weights
    model.to_empty(device=device)
    with torch.no_grad():
        for m in model.modules():
            reset = getattr(m, "reset_parameters", None)
            if callable(reset) and not isinstance(m, (nn.Linear,
                                                      nn.Embedding)):
                reset()        # the norms' ones and zeros
        model.apply(init_weights)
    return model


def built(make, strategy: str, ctx, *, bf16: bool = False,
          recompute: str = "none", **wrap_kw) -> nn.Module:
    """``make()`` (a model builder, seeded) with ``recompute`` applied,
    wrapped for ``strategy`` and living on ``ctx.device`` (module doc)."""
    if on_meta(ctx, strategy):
        with torch.device("meta"):
            model = apply(make(), recompute)
        model = wrap(model, strategy, ctx, bf16=bf16, **wrap_kw)
        return materialise(model, ctx.device)
    if ctx.device.type != "cpu" and strategy == "ddp":
        with torch.device(ctx.device):
            model = apply(make(), recompute)
    else:
        model = apply(make(), recompute)
    return wrap(model, strategy, ctx, bf16=bf16, **wrap_kw)
