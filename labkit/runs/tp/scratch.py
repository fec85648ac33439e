"""Megatron's tensor parallelism written by hand: ``f``, ``g`` and the
column- and row-parallel linear layers (Shoeybi et al. 2019, Sec. 3).

    torchrun --nproc-per-node 2 -m labkit.runs.tensor_parallel \
        --variants scratch

The ``scratch`` and ``no_comm`` variants of :mod:`labkit.runs.tensor_parallel`.
"""
from __future__ import annotations

import copy

import torch
import torch.distributed as tdist
import torch.nn as nn
import torch.nn.functional as F

from labkit.runs.tp.layers import LocalAttention, LocalMLP, TPBlock


class _F(torch.autograd.Function):
    """``f``: identity forward, all-reduce of the gradient backward."""

    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        if ctx.comm:
            grad = grad.contiguous().clone()
            tdist.all_reduce(grad)
        return grad, None


class _G(torch.autograd.Function):
    """``g``: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, comm):
        x = x.contiguous().clone()
        if comm:
            tdist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class ColumnParallelLinear(nn.Module):
    """``y_r = x W_r^T + b_r``: this rank's slice of the output features."""

    def __init__(self, weight, bias):
        super().__init__()
        self.weight = nn.Parameter(weight.clone())
        self.bias = nn.Parameter(bias.clone())

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """``y = sum_r x_r W_r^T + b``: partial sums, reduced by ``g``."""

    def __init__(self, weight, bias, comm=True):
        super().__init__()
        self.weight = nn.Parameter(weight.clone())
        self.bias = nn.Parameter(bias.clone())  # added once, after the sum
        self.comm = comm

    def forward(self, x):
        return _G.apply(F.linear(x, self.weight), self.comm) + self.bias


class _FOp(nn.Module):
    def __init__(self, comm):
        super().__init__()
        self.comm = comm

    def forward(self, x):
        return _F.apply(x, self.comm)


def qkv_rows(hidden: int, heads: int, rank: int, tp: int) -> torch.Tensor:
    """Rows of the fused ``[3h, h]`` QKV weight that belong to this rank.

    The weight is ``[q; k; v]``, each ``[heads x head_dim, h]``: rank ``r``
    owns heads ``r a/t .. (r+1) a/t - 1`` of each of q, k and v. Viewed as
    ``[3, a, d, h]`` the split is along axis 1 (heads), not axis 0.
    """
    d = hidden // heads
    per = heads // tp
    heads_rows = torch.arange(rank * per * d, (rank + 1) * per * d)
    return torch.cat([heads_rows + i * hidden for i in range(3)])


def scratch_block(ref, heads: int, rank: int, tp: int, comm=True) -> TPBlock:
    """Shard ``ref`` (a ``labkit.nn.model.Block``) by hand for this rank."""
    h = ref.ln1.normalized_shape[0]
    a, m = ref.attn, ref.mlp
    rows = qkv_rows(h, heads, rank, tp)
    cols = slice(rank * h // tp, (rank + 1) * h // tp)
    width = m.fc.out_features
    fcs = slice(rank * width // tp, (rank + 1) * width // tp)
    with torch.no_grad():
        qkv = ColumnParallelLinear(a.qkv.weight[rows], a.qkv.bias[rows])
        proj = RowParallelLinear(a.proj.weight[:, cols], a.proj.bias, comm)
        fc = ColumnParallelLinear(m.fc.weight[fcs], m.fc.bias[fcs])
        out = RowParallelLinear(m.proj.weight[:, fcs], m.proj.bias, comm)
    attn = LocalAttention(h // heads, proj, qkv=qkv, f=_FOp(comm))
    mlp = LocalMLP(fc, out, f=_FOp(comm))
    return TPBlock(copy.deepcopy(ref.ln1), attn, copy.deepcopy(ref.ln2), mlp)


def scratch_full_grads(block: TPBlock, heads: int, tp: int) -> dict:
    """Reassemble the full gradients, named as in the reference block."""
    def gather(t, dim):
        parts = [torch.empty_like(t) for _ in range(tp)]
        tdist.all_gather(parts, t.contiguous())
        return parts if dim is None else torch.cat(parts, dim)

    a, m = block.attn, block.mlp
    h = block.ln1.normalized_shape[0]
    per_rank = [p.view(3, h // tp, *p.shape[1:])
                for p in gather(a.qkv.weight.grad, None)]
    qkv_w = torch.cat([torch.cat([p[i] for p in per_rank]) for i in range(3)])
    per_rank = [p.view(3, h // tp) for p in gather(a.qkv.bias.grad, None)]
    qkv_b = torch.cat([torch.cat([p[i] for p in per_rank]) for i in range(3)])
    out = {"attn.qkv.weight": qkv_w, "attn.qkv.bias": qkv_b,
           "attn.proj.weight": gather(a.proj.weight.grad, 1),
           "attn.proj.bias": a.proj.bias.grad,
           "mlp.fc.weight": gather(m.fc.weight.grad, 0),
           "mlp.fc.bias": gather(m.fc.bias.grad, 0),
           "mlp.proj.weight": gather(m.proj.weight.grad, 1),
           "mlp.proj.bias": m.proj.bias.grad}
    for name in ("ln1", "ln2"):
        for p in ("weight", "bias"):
            out[f"{name}.{p}"] = getattr(getattr(block, name), p).grad
    return out
