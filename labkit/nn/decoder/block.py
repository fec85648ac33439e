"""One decoder layer, read from the architecture record: the residual
block around attention and the MLP, with its norms where the record puts
them, and the gated cross-attention layer of Llama 3.2 Vision.

    from labkit import arch
    from labkit.nn.decoder.block import Block
    blk = Block(arch.preset("llama-tiny"), i=0)

- ``pre_norms`` (GPT-2, Llama): ``x + f(norm(x))`` for f = attention, MLP;
- ``post_norms`` too: the "sandwich" ``x + norm(f(norm(x)))`` of Gemma 2
  (Gemma Team 2024, Sec. 2; ``modeling_gemma2.py``: input, post-attention,
  pre- and post-feedforward norms); alone, OLMo 2's reordered norm
  ``x + norm(f(x))`` (OLMo et al. 2024, "2 OLMo 2 Furious", Sec. 3;
  ``modeling_olmo2.py``);
- ``parallel``: ``x + attn(norm(x)) + mlp(norm(x))``, one norm read by
  both branches (GPT-J; PaLM, Chowdhery et al. 2022, Sec. 2; Phi-1,
  ``modeling_phi.py``);
- a mixture of experts in place of the MLP from ``first_dense_layers`` on
  (:class:`labkit.nn.moe.layer.MoE`).

Absent norms are ``nn.Identity``, so every block has the same six
attributes in forward order: ``ln1``, ``attn``, ``post_attn``, ``ln2``,
``mlp``, ``post_mlp``.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from labkit.nn.decoder.attention import Attention, CrossAttention
from labkit.nn.decoder.fields import norm, record
from labkit.nn.mlp import MLP
from labkit.nn.moe.layer import MoE  # router, capacity, shared experts


def _norm_or_skip(a, on: bool) -> nn.Module:
    return norm(a, a.hidden) if on else nn.Identity()


class Block(nn.Module):
    def __init__(self, a, i: int = 0):
        super().__init__()
        a = record(a)
        self.parallel = a.parallel
        self.ln1 = _norm_or_skip(a, a.pre_norms)
        self.attn = Attention(a, i)
        self.post_attn = _norm_or_skip(a, a.post_norms)
        self.ln2 = _norm_or_skip(a, a.pre_norms and not a.parallel)
        moe = a.experts and i >= a.first_dense_layers
        self.mlp = MoE(a) if moe else MLP(a, a.ffn)
        self.post_mlp = _norm_or_skip(a, a.post_norms)

    def forward(self, x):
        if self.parallel:
            y = self.ln1(x)
            return x + self.attn(y) + self.mlp(y)
        x = x + self.post_attn(self.attn(self.ln1(x)))
        return x + self.post_mlp(self.mlp(self.ln2(x)))


class CrossBlock(nn.Module):
    """A gated cross-attention layer (``MllamaCrossAttentionDecoderLayer``;
    Dubey et al. 2024, Sec. 7.2): ``x + tanh(g_a) attn(norm(x), images)``,
    then ``x + tanh(g_m) mlp(norm(x))``, both gates zero at the start. A
    text-only step skips the layer (``MllamaTextModel``: no image states,
    no work, no gradients): :class:`labkit.nn.decoder.Decoder` does the
    same."""

    def __init__(self, a, i: int = 0):
        super().__init__()
        a = record(a)
        self.ln1 = norm(a, a.hidden)
        self.attn = CrossAttention(a)
        self.attn_gate = nn.Parameter(torch.zeros(1))
        self.ln2 = norm(a, a.hidden)
        self.mlp = MLP(a, a.ffn)
        self.mlp_gate = nn.Parameter(torch.zeros(1))

    def reset_parameters(self):     # the gates (after a meta build)
        nn.init.zeros_(self.attn_gate)
        nn.init.zeros_(self.mlp_gate)

    def forward(self, x, images):
        x = x + self.attn_gate.tanh() * self.attn(self.ln1(x), images)
        return x + self.mlp_gate.tanh() * self.mlp(self.ln2(x))
