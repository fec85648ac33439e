"""The pieces of a tensor-parallel block, for every variant of chapter 5.

    torchrun --nproc-per-node 2 -m labkit.runs.tensor_parallel

``LocalAttention`` runs causal self-attention over the heads this rank
holds (it reads the number of local heads from the local width, as
tensor-parallel code must; torchtitan does the same), ``LocalMLP`` the MLP
on this rank's slice, ``TPBlock`` the pre-LayerNorm block around them, and
:func:`separate_qkv` turns the GPT's fused QKV projection into three
linear layers that ``ColwiseParallel`` can split by heads. Used by
:mod:`labkit.runs.tensor_parallel` (one block, chapter 5) and
:mod:`labkit.runs.mesh` (the whole GPT on a 2-D mesh, chapter 10).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class LocalAttention(nn.Module):
    """Causal self-attention over the heads whose Q, K, V this rank holds.

    ``qkv`` (fused, output ``[q | k | v]``) or separate ``q``, ``k``, ``v``
    projections; the number of local heads is read from the local width,
    as tensor-parallel code must (torchtitan does the same).
    """

    def __init__(self, head_dim, proj, qkv=None, q=None, k=None, v=None,
                 f=None):
        super().__init__()
        self.head_dim = head_dim
        self.qkv, self.q, self.k, self.v, self.proj = qkv, q, k, v, proj
        self.f = f  # the f operator before the column-parallel layer

    def forward(self, x):
        b, s = x.shape[0], x.shape[1]
        if self.f is not None:
            x = self.f(x)
        if self.qkv is not None:
            q, k, v = self.qkv(x).chunk(3, dim=-1)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        heads = q.shape[-1] // self.head_dim
        q, k, v = (t.reshape(b, s, heads, self.head_dim).transpose(1, 2)
                   for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, s, -1))


class LocalMLP(nn.Module):
    def __init__(self, fc, proj, f=None):
        super().__init__()
        self.fc, self.proj, self.f = fc, proj, f

    def forward(self, x):
        if self.f is not None:
            x = self.f(x)
        return self.proj(F.gelu(self.fc(x)))


class TPBlock(nn.Module):
    """The pre-LayerNorm block; LayerNorms replicated, the rest split."""

    def __init__(self, ln1, attn, ln2, mlp):
        super().__init__()
        self.ln1, self.attn, self.ln2, self.mlp = ln1, attn, ln2, mlp

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def separate_qkv(attn, heads: int) -> LocalAttention:
    """``labkit.nn.model.Attention`` with its fused ``[3h, h]`` QKV weight cut
    into separate Q, K and V layers (same values, same device and dtype),
    so that a column split of each gives a rank whole heads."""
    h = attn.proj.in_features
    w = attn.qkv.weight
    lin = []
    for i in range(3):
        q = nn.Linear(h, h, device=w.device, dtype=w.dtype)
        with torch.no_grad():
            q.weight.copy_(w[i * h:(i + 1) * h])
            q.bias.copy_(attn.qkv.bias[i * h:(i + 1) * h])
        lin.append(q)
    return LocalAttention(h // heads, attn.proj, q=lin[0], k=lin[1],
                          v=lin[2])
