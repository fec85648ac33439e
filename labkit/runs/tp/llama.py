"""Tensor parallelism of the Llama-style block (GQA, SwiGLU, RMSNorm,
RoPE), for the 2-D mesh of chapter 10.

    torchrun --nproc-per-node 4 -m labkit.runs.mesh --arch llama \
        --layouts 2x2,2x2+sp,1x4

Megatron-LM's split (Shoeybi et al. 2019, Sec. 3) with the block's own
layer names: ``q``, ``k``, ``v`` and SwiGLU's ``gate`` and ``up``
column-parallel, ``o`` and ``down`` row-parallel, the RMSNorms whole (or
on sequence shards with sequence parallelism). Under grouped-query
attention (Ainslie et al. 2023) a column split of ``k`` and ``v`` gives
each rank ``kv_heads / t`` whole K/V heads, next to the ``heads / t``
query heads that read them. With ``t > kv_heads`` there are not enough
K/V heads to go round: each rank keeps one whole K/V head (the one its
query heads read), so every K/V head is replicated on ``t / kv_heads``
ranks, and the gradients of those copies are summed among them before the
optimizer step (:mod:`labkit.runs.tp.kv_copies`). The bytes that costs are
:func:`labkit.predict.tensor_parallel.gqa.layer_params`'s.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from labkit.nn.decoder import repeat_kv, rope, rope_tables
from labkit.predict.tensor_parallel.gqa import kv_split


class TPAttention(nn.Module):
    """Causal GQA over the query heads this rank holds. The numbers of
    local Q and K/V heads are read from the local widths (torchtitan does
    the same), so one module serves every ``t``."""

    def __init__(self, attn, replicated_kv: bool):
        super().__init__()
        self.a, self.replicated_kv = attn.a, replicated_kv
        self.q, self.k, self.v, self.o = attn.q, attn.k, attn.v, attn.o

    def forward(self, x):
        a, (b, s) = self.a, x.shape[:2]
        xkv = x
        if self.replicated_kv:   # plain K/V layers on this rank's input:
            from torch.distributed.tensor import Partial   # its gradient
            xkv = x.to_local(grad_placements=[Partial()])  # is a part
        q, k, v = (t.view(b, s, -1, a.head_dim).transpose(1, 2)
                   for t in (self.q(x), self.k(xkv), self.v(xkv)))
        if a.positions == "rope":
            cos, sin = rope_tables(s, a.head_dim, a.rope_theta, q)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        group = q.shape[1] // k.shape[1]      # query heads per K/V head
        k, v = repeat_kv(k, group), repeat_kv(v, group)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, -1))


def tp_plan(sequence_parallel: bool, replicated_kv: bool) -> dict:
    """The block's plan for ``parallelize_module``: as
    :func:`labkit.runs.mesh.tp_plan` for the GPT, with the Llama names;
    replicated K/V layers are not in it (each rank keeps its head)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel,
                                                   PrepareModuleInput,
                                                   RowwiseParallel,
                                                   SequenceParallel)
    cols = ["attn.q", "mlp.gate", "mlp.up"]
    cols += [] if replicated_kv else ["attn.k", "attn.v"]
    col = {n: ColwiseParallel() for n in cols}
    if not sequence_parallel:
        return {"attn": PrepareModuleInput(
                    input_layouts=(Replicate(),),
                    desired_input_layouts=(Replicate(),),
                    use_local_output=False),
                "mlp": PrepareModuleInput(
                    input_layouts=(Replicate(),),
                    desired_input_layouts=(Replicate(),),
                    use_local_output=False),
                **col, "attn.o": RowwiseParallel(),
                "mlp.down": RowwiseParallel()}
    gather = {"input_layouts": (Shard(1),),
              "desired_input_layouts": (Replicate(),)}
    return {"ln1": SequenceParallel(), "ln2": SequenceParallel(),
            "attn": PrepareModuleInput(**gather),
            "mlp": PrepareModuleInput(**gather), **col,
            "attn.o": RowwiseParallel(output_layouts=Shard(1)),
            "mlp.down": RowwiseParallel(output_layouts=Shard(1))}


def keep_kv_head(linear: nn.Linear, head: int, head_dim: int) -> nn.Linear:
    """The rows of one K/V head of ``linear`` (same values and device)."""
    w = linear.weight
    one = nn.Linear(w.shape[1], head_dim, bias=linear.bias is not None,
                    device=w.device, dtype=w.dtype)
    rows = slice(head * head_dim, (head + 1) * head_dim)
    with torch.no_grad():
        one.weight.copy_(w[rows])
        if linear.bias is not None:
            one.bias.copy_(linear.bias[rows])
    one.kv_head = head              # which head of the model it holds
    return one


def parallelize_block(block, tp_mesh, a, sequence_parallel: bool):
    """One Llama-style block split over ``tp_mesh``, in place; returns the
    K/V layers this rank holds a replica of (empty when ``t`` divides the
    K/V heads)."""
    from torch.distributed.tensor.parallel import parallelize_module
    t = tp_mesh.size()
    if a.qkv_fused or a.qk_norm or a.experts or a.mlp != "swiglu":
        raise ValueError(f"{a.name}: the Llama plan splits q, k, v, o and "
                         "gate, up, down (no fused QKV, Q/K norms or MoE)")
    split = kv_split(a, t)      # one line if t and the K/V heads disagree
    replicated = split["replicas"] > 1
    attn = TPAttention(block.attn, replicated)
    if replicated:              # this rank's query heads read this head
        head = tp_mesh.get_local_rank() // split["replicas"]
        attn.k = keep_kv_head(attn.k, head, a.head_dim)
        attn.v = keep_kv_head(attn.v, head, a.head_dim)
    block.attn = attn
    parallelize_module(block, tp_mesh, tp_plan(sequence_parallel,
                                               replicated))
    return [attn.k, attn.v] if replicated else []


def grad_rel_diff(model, config, x, y, seed: int = 0) -> float:
    """Largest ``|g - g_ref|`` over this rank's parameters, over the
    largest ``|g_ref|`` of the whole model (one scale, as lab 5's: a
    tensor whose true gradient is zero, such as the GPT's key bias --
    softmax ignores a shift shared by all keys -- holds rounding noise
    only, and noise over noise is not an error): the gradients of the
    last backward (FSDP shards and TP pieces made whole with
    ``full_tensor``) against one process's on the global batch ``x, y``
    from the same seed. A K/V copy is compared with its head's rows; the
    GPT's separate Q, K, V with its fused ``qkv``'s thirds."""
    from labkit.nn.model import build
    ref = build(config, seed).to(x.device)
    ref(x, y).backward()
    want = {n: p.grad for n, p in ref.named_parameters()}
    scale = max(t.abs().max().item() for t in want.values())
    worst = 0.0
    for name, p in model.named_parameters():
        g = p.grad
        g = g.full_tensor() if hasattr(g, "full_tensor") else g
        base, _, leaf = name.rpartition(".")
        if base.endswith(("attn.q", "attn.k", "attn.v")) and \
                f"{base[:-2]}.qkv.{leaf}" in want:      # the GPT's qkv
            i = "qkv".index(base[-1])
            r = want[f"{base[:-2]}.qkv.{leaf}"].chunk(3, dim=0)[i]
        else:
            r = want[name]
        head = getattr(model.get_submodule(base), "kv_head", None)
        if head is not None:            # a K/V copy: its head's rows
            r = r.split(g.shape[0], dim=0)[head]
        worst = max(worst, (g - r).abs().max().item())
    return worst / scale
