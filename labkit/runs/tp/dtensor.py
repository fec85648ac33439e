"""Chapter 5's block split with DTensor: ``parallelize_module``.

    torchrun --nproc-per-node 2 -m labkit.runs.tensor_parallel \
        --variants dtensor,wrong_split

``ColwiseParallel`` on separate Q, K, V projections and the MLP's first
layer, ``RowwiseParallel`` on the two output projections; ``wrong_split``
puts ``ColwiseParallel`` on the fused QKV layer instead.
"""
from __future__ import annotations

import copy

import torch

from labkit.runs.tp.layers import LocalAttention, LocalMLP, TPBlock, \
    separate_qkv


def dtensor_block(ref, heads: int, mesh, fused_qkv: bool) -> TPBlock:
    """Split ``ref`` with ``parallelize_module`` (Colwise / Rowwise)."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (ColwiseParallel,
                                                   PrepareModuleInput,
                                                   RowwiseParallel,
                                                   parallelize_module)
    h = ref.ln1.normalized_shape[0]
    a = ref.attn
    if fused_qkv:
        attn = LocalAttention(h // heads, copy.deepcopy(a.proj),
                              qkv=copy.deepcopy(a.qkv))
    else:  # the block's device and dtype (bf16 too)
        attn = separate_qkv(copy.deepcopy(a), heads)
    block = TPBlock(copy.deepcopy(ref.ln1), attn, copy.deepcopy(ref.ln2),
                    LocalMLP(copy.deepcopy(ref.mlp.fc),
                             copy.deepcopy(ref.mlp.proj)))
    # The attention input becomes one replicated DTensor, so the gradients
    # of Q, K and V are summed before a single all-reduce (the f operator).
    plan = {"attn": PrepareModuleInput(input_layouts=(Replicate(),),
                                       desired_input_layouts=(Replicate(),),
                                       use_local_output=False),
            "attn.proj": RowwiseParallel(),
            "mlp.fc": ColwiseParallel(), "mlp.proj": RowwiseParallel()}
    if fused_qkv:
        plan["attn.qkv"] = ColwiseParallel()
    else:
        plan.update({f"attn.{n}": ColwiseParallel() for n in "qkv"})
    return parallelize_module(block, mesh, plan)


def dtensor_full_grads(block: TPBlock) -> dict:
    def full(t):
        return t.full_tensor() if hasattr(t, "full_tensor") else t

    g = {n: full(p.grad) for n, p in block.named_parameters()}
    if "attn.qkv.weight" not in g:
        for p in ("weight", "bias"):
            g[f"attn.qkv.{p}"] = torch.cat(
                [g.pop(f"attn.{n}.{p}") for n in "qkv"])
    return g
