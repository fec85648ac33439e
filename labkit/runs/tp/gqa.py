"""Megatron's split of the Llama-style block: GQA heads and SwiGLU.

    torchrun --nproc-per-node 2 -m labkit.runs.tensor_parallel \
        --llama-variants scratch,dtensor

The block of :class:`labkit.nn.decoder.Block` on a Llama-style record
(RMSNorm, grouped-query attention with RoPE, SwiGLU) split over ``t``
ranks as Megatron-LM splits it (Shoeybi et al. 2019, Sec. 3):

- attention: Q, K and V column-parallel *by heads*: rank ``r`` owns query
  heads ``r a/t ..`` and the K/V heads those queries read (Ainslie et al.
  2023: query head ``i`` reads K/V head ``i // (a / kv)``); the output
  projection ``o`` row-parallel. With ``t > kv_heads`` there are not
  enough K/V heads to go round: each is replicated on ``t / kv_heads``
  ranks (:func:`labkit.predict.tensor_parallel.gqa.kv_split`), and since
  each copy's gradient holds only its own queries' share, the copies'
  gradients are all-reduced among them
  (:func:`labkit.runs.tp.kv_copies.sum_kv_grads`) before the optimizer step;
- MLP: ``gate`` and ``up`` column-parallel, ``down`` row-parallel (the
  product ``silu(gate) * up`` is elementwise, so it stays local);
- one ``f`` before the attention and one before the MLP (the gradients of
  Q, K, V -- or of gate and up -- are summed locally before the single
  all-reduce), one ``g`` after ``o`` and after ``down``: the GPT's four
  all-reduces of ``b x s x h`` per block.

The ``dtensor`` variant puts the same plan through ``parallelize_module``
(``ColwiseParallel`` on q, k, v, gate, up; ``RowwiseParallel`` on o, down;
``PrepareModuleInput`` on the attention and the MLP). It needs
``kv_heads % t == 0``: ``ColwiseParallel`` cuts the columns evenly and
cannot replicate a head.
"""
from __future__ import annotations

import copy

import torch
import torch.distributed as tdist
import torch.nn as nn
import torch.nn.functional as F

from labkit.nn.decoder import repeat_kv, rope, rope_tables
from labkit.predict.tensor_parallel.gqa import kv_split
from labkit.runs.tp import kv_copies
from labkit.runs.tp.scratch import _FOp, _G


class _Col(nn.Module):
    """This rank's output features of a bias-free linear layer."""

    def __init__(self, weight):
        super().__init__()
        self.weight = nn.Parameter(weight.clone())

    def forward(self, x):
        return F.linear(x, self.weight)


class _Row(nn.Module):
    """This rank's input features; the partial sums reduced by ``g``."""

    def __init__(self, weight, comm=True):
        super().__init__()
        self.weight = nn.Parameter(weight.clone())
        self.comm = comm

    def forward(self, x):
        return _G.apply(F.linear(x, self.weight), self.comm)


class GQAAttention(nn.Module):
    """Causal GQA over the query and K/V heads this rank holds (counted
    from the local widths, as tensor-parallel code must)."""

    def __init__(self, a, q, k, v, o, f=None):
        super().__init__()
        self.d, self.theta = a.head_dim, a.rope_theta
        self.q, self.k, self.v, self.o, self.f = q, k, v, o, f

    def forward(self, x):
        b, s, d = x.shape[0], x.shape[1], self.d
        if self.f is not None:
            x = self.f(x)
        q, k, v = (t.reshape(b, s, -1, d).transpose(1, 2)
                   for t in (self.q(x), self.k(x), self.v(x)))
        cos, sin = rope_tables(s, d, self.theta, q)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        group = q.shape[1] // k.shape[1]   # local query heads per K/V head
        k, v = repeat_kv(k, group), repeat_kv(v, group)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, -1))


class SwiGLUMLP(nn.Module):
    def __init__(self, gate, up, down, f=None):
        super().__init__()
        self.gate, self.up, self.down, self.f = gate, up, down, f

    def forward(self, x):
        if self.f is not None:
            x = self.f(x)
        return self.down(F.silu(self.gate(x)) * self.up(x))


class GQABlock(nn.Module):
    """The pre-RMSNorm block; the norms replicated, the rest split."""

    def __init__(self, ln1, attn, ln2, mlp):
        super().__init__()
        self.ln1, self.attn, self.ln2, self.mlp = ln1, attn, ln2, mlp

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def head_rows(a, rank: int, tp: int) -> tuple[slice, slice]:
    """Rows of W_q and of W_k (= W_v) that rank ``rank`` holds."""
    d, hq = a.head_dim, a.heads // tp
    kv = kv_split(a, tp)
    j = rank // kv["replicas"] * kv["kv_heads_per_rank"]   # first KV head
    return (slice(rank * hq * d, (rank + 1) * hq * d),
            slice(j * d, (j + kv["kv_heads_per_rank"]) * d))


def gqa_block(ref, a, rank: int, tp: int, comm: bool = True) -> GQABlock:
    """Shard ``ref`` (a Llama-style ``labkit.nn.decoder.Block``) for this
    rank."""
    at, m = ref.attn, ref.mlp
    qr, kr = head_rows(a, rank, tp)
    cols = slice(rank * a.ffn // tp, (rank + 1) * a.ffn // tp)
    with torch.no_grad():
        attn = GQAAttention(a, _Col(at.q.weight[qr]), _Col(at.k.weight[kr]),
                            _Col(at.v.weight[kr]),
                            _Row(at.o.weight[:, qr], comm), f=_FOp(comm))
        mlp = SwiGLUMLP(_Col(m.gate.weight[cols]), _Col(m.up.weight[cols]),
                        _Row(m.down.weight[:, cols], comm), f=_FOp(comm))
    return GQABlock(copy.deepcopy(ref.ln1), attn, copy.deepcopy(ref.ln2),
                    mlp)


def gqa_full_grads(block: GQABlock, a, tp: int) -> dict:
    """Reassemble the full gradients, named as in the reference block
    (one copy of each replicated K/V head: the sum of the copies'
    gradients has made them equal)."""
    def gather(t):
        parts = [torch.empty_like(t) for _ in range(tp)]
        tdist.all_gather(parts, t.contiguous())
        return parts

    at, m = block.attn, block.mlp
    r = kv_split(a, tp)["replicas"]
    out = {"attn.q.weight": torch.cat(gather(at.q.weight.grad)),
           "attn.o.weight": torch.cat(gather(at.o.weight.grad), 1),
           "mlp.gate.weight": torch.cat(gather(m.gate.weight.grad)),
           "mlp.up.weight": torch.cat(gather(m.up.weight.grad)),
           "mlp.down.weight": torch.cat(gather(m.down.weight.grad), 1),
           "ln1.weight": block.ln1.weight.grad,
           "ln2.weight": block.ln2.weight.grad}
    for n in "kv":
        out[f"attn.{n}.weight"] = torch.cat(
            gather(getattr(at, n).weight.grad)[::r])
    return out


def gqa_dtensor_block(ref, a, mesh) -> GQABlock:
    """The same split with ``parallelize_module`` (kv_heads % t == 0)."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (ColwiseParallel,
                                                   PrepareModuleInput,
                                                   RowwiseParallel,
                                                   parallelize_module)
    at, m = copy.deepcopy(ref.attn), copy.deepcopy(ref.mlp)
    block = GQABlock(copy.deepcopy(ref.ln1),
                     GQAAttention(a, at.q, at.k, at.v, at.o),
                     copy.deepcopy(ref.ln2),
                     SwiGLUMLP(m.gate, m.up, m.down))
    # one replicated input per sub-layer: the gradients of its column
    # layers are summed before one all-reduce (the f operator)
    once = PrepareModuleInput(input_layouts=(Replicate(),),
                              desired_input_layouts=(Replicate(),),
                              use_local_output=False)
    plan = {"attn": once, "mlp": copy.deepcopy(once),
            "attn.o": RowwiseParallel(), "mlp.down": RowwiseParallel(),
            **{f"attn.{n}": ColwiseParallel() for n in "qkv"},
            **{f"mlp.{n}": ColwiseParallel() for n in ("gate", "up")}}
    return parallelize_module(block, mesh, plan)


def llama_record(hidden: int, heads: int, kv_heads: int, seq: int):
    """The one-block Llama-style record of the lab's sizes (SwiGLU width:
    :func:`labkit.predict.model.arch.llama_shape`)."""
    from labkit.predict.model.arch import llama, llama_shape
    return llama(1, hidden, heads, kv_heads, llama_shape(hidden, heads)[1],
                 8, max_seq=seq)


def llama_split(variant, a, ctx, mesh, like):
    """``(reference, split, full_grads, sync)`` of a Llama-style variant
    for :mod:`labkit.runs.tensor_parallel`: scratch, no_comm, dtensor, and
    two negative controls of the K/V copies' gradient sum: no_kv_sum
    (skipped) and wrong_kv_group (over :func:`kv_copies.strided_ranks`)."""
    from labkit.nn.decoder import Block
    tp, rank = ctx.world_size, ctx.rank
    ref = Block(a).to(device=like.device, dtype=like.dtype)
    if variant == "dtensor":
        return (ref, lambda r: gqa_dtensor_block(r, a, mesh),
                lambda b: {n: getattr(p.grad, "full_tensor",
                                      lambda: p.grad)()
                           for n, p in b.named_parameters()}, None)
    sync = None
    ranks_of = {"scratch": kv_copies.copy_ranks,
                "wrong_kv_group": kv_copies.strided_ranks}.get(variant)
    if ranks_of is not None:    # one TP group: the world
        group = kv_copies.group_of(kv_copies.kv_copy_groups(
            [list(range(tp))], a, ranks_of), rank)
        sync = lambda b: kv_copies.sum_kv_grads(  # noqa: E731
            [b.attn.k, b.attn.v], group)
    return (ref, lambda r: gqa_block(r, a, rank, tp,
                                     comm=variant != "no_comm"),
            lambda b: gqa_full_grads(b, a, tp), sync)
