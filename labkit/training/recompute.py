"""Activation recomputation for the course's GPT: none, full or selective.

    from labkit.training.recompute import apply
    apply(model, "selective")      # before FSDP's fully_shard, as torchtitan

``full`` wraps each block in ``torch.utils.checkpoint`` (non-reentrant):
the block keeps only its input and runs its forward again in backward
(Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost";
Korthikanti et al. 2022, Sec. 5: 2 s b h bytes per layer in 16-bit).
``selective`` is the course's *save-matmuls* policy: it keeps the
outputs of every op in :data:`POLICY_OPS` (all matmuls and SDPA) through
``torch.utils.checkpoint.create_selective_checkpoint_contexts`` and
recomputes the rest (LayerNorm, GELU, weight casts): cheap FLOPs, bytes
saved. torchtitan's op-level SAC (``selective_ac_option = "op"``,
``torchtitan/distributed/activation_checkpoint.py``) saves the same kinds
of ops "except every second mm", which it recomputes: less memory, more
FLOPs than this policy. The ledger of what each keeps is
:func:`labkit.predict.activations.saved`.

Wrapping uses PyTorch's ``checkpoint_wrapper``, which keeps the parameter
names (``blocks.0.ln1.weight``), so checkpoints and FSDP see one model.
"""
from __future__ import annotations

import functools

import torch
from torch.utils.checkpoint import (CheckpointPolicy,
                                    create_selective_checkpoint_contexts)

MODES = ("none", "full", "selective")
_aten = torch.ops.aten
POLICY_OPS = {_aten.mm.default, _aten.addmm.default, _aten.bmm.default,
              _aten._scaled_dot_product_flash_attention.default,
              _aten._scaled_dot_product_efficient_attention.default,
              _aten._scaled_dot_product_cudnn_attention.default,
              _aten._scaled_dot_product_flash_attention_for_cpu.default}


def _policy(ctx, op, *args, **kwargs):
    return (CheckpointPolicy.MUST_SAVE if op in POLICY_OPS
            else CheckpointPolicy.PREFER_RECOMPUTE)


def selective_context():
    """The context pair ``checkpoint(context_fn=...)`` takes."""
    return create_selective_checkpoint_contexts(_policy)


def apply(model, mode: str):
    """Checkpoint every block of ``model`` (a labkit.nn.model.GPT) in place."""
    if mode not in MODES:
        raise ValueError(f"unknown recompute {mode!r}: {MODES}")
    if mode == "none":
        return model
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        checkpoint_wrapper)
    kw = {"preserve_rng_state": False}  # no dropout: nothing random
    if mode == "selective":
        kw["context_fn"] = selective_context
    for i, block in enumerate(model.blocks):
        model.blocks[i] = checkpoint_wrapper(block, **kw)
    return model
