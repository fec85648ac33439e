"""The decoder's attention, read from the architecture record: causal
self-attention with every variant the record carries, and the gated
cross-attention of Llama 3.2 Vision.

    from labkit import arch
    from labkit.nn.decoder.attention import Attention
    att = Attention(arch.preset("llama-tiny"), i=0)

- rotary positions (Su et al. 2021, Eq. 34, in the "rotate half" layout
  of Hugging Face's Llama) on the first ``rotary_fraction`` of each head
  (partial rotary: GPT-NeoX; Phi-1's ``partial_rotary_factor``, the rest
  passes through, as ``modeling_phi.py``);
- grouped-query attention (Ainslie et al. 2023): each K/V head repeated
  for its ``heads / kv_heads`` query heads before SDPA (``repeat_kv``);
- ``qk_norm``: a norm over each query and key head (Qwen3, Gemma 3), or
  with ``qk_norm_full`` over all heads at once, before the heads are split
  (OLMo 2, ``modeling_olmo2.py``: ``q_norm`` of ``heads x head_dim``);
- ``window`` on the layers of ``window_layers``: a query sees its last
  ``window`` keys, itself included (Mistral 7B, Jiang et al. 2023, Sec. 2;
  transformers' ``sliding_window_causal`` mask); the scores are still
  computed for every key, as the masked attention of transformers does;
- ``attn_softcap``: ``cap tanh(scores / cap)`` before the mask (Gemma 2,
  Gemma Team 2024, Sec. 2; ``modeling_gemma2.py``'s eager attention);
- ``sinks``: one learned logit per head joins each softmax's denominator
  and is dropped after it (gpt-oss, ``modeling_gpt_oss.py``
  ``eager_attention_forward``; Xiao et al. 2023, "attention sinks").

SDPA computes the plain case (its mask for a local layer); soft-caps and
sinks change the softmax itself, so those layers build the scores
explicitly and keep them (b x heads x s x s), as transformers' eager path.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from labkit.nn.decoder.fields import norm, record


def rope_tables(seq: int, dim: int, theta: float, like):
    """cos and sin of the rotary angles, ``[seq, dim]`` in ``like``'s
    dtype: computed once per layer, shared by its queries and keys."""
    inv = 1.0 / theta ** (torch.arange(0, dim, 2, device=like.device,
                                       dtype=torch.float32) / dim)
    ang = torch.outer(torch.arange(seq, device=like.device,
                                   dtype=torch.float32), inv)
    ang = torch.cat((ang, ang), dim=-1)
    return ang.cos().to(like.dtype), ang.sin().to(like.dtype)


def rope(x, cos, sin):
    """Rotary positions on ``x`` of shape ``[b, heads, s, d]``; with a
    table narrower than ``d`` only the first ``cos.shape[-1]`` features
    turn (partial rotary), the rest pass."""
    r = cos.shape[-1]
    if r < x.shape[-1]:
        return torch.cat((rope(x[..., :r], cos, sin), x[..., r:]), dim=-1)
    x1, x2 = x[..., :r // 2], x[..., r // 2:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def rotary_dims(a) -> int:
    """Features of a head that RoPE turns (``int(fraction * head_dim)``,
    as transformers' Phi)."""
    return int(a.rotary_fraction * a.head_dim)


def repeat_kv(x, group: int):
    """``[b, kv_heads, s, d]`` -> ``[b, kv_heads * group, s, d]`` (one
    copy, as Hugging Face's ``repeat_kv``; SDPA saves the copies)."""
    if group == 1:
        return x
    b, kv, s, d = x.shape
    return x[:, :, None].expand(b, kv, group, s, d).reshape(b, kv * group,
                                                            s, d)


def visible(s: int, window: int, device):
    """``[s, s]`` booleans: key ``j`` visible to query ``i`` (causal, and
    within the last ``window`` keys when ``window`` > 0)."""
    i = torch.arange(s, device=device)
    d = i[:, None] - i[None, :]
    ok = d >= 0
    return ok & (d < window) if window else ok


class Attention(nn.Module):
    """Causal self-attention of layer ``i``. ``qkv_fused``: one ``qkv``
    Linear and the output ``proj`` (the GPT's names, which its
    tensor-parallel runs and checkpoints use); otherwise ``q``, ``k``,
    ``v`` and ``o``."""

    def __init__(self, a, i: int = 0):
        super().__init__()
        a = record(a)
        self.a = a
        self.window = a.window if i in a.window_layers else 0
        widths = (a.q_dim, a.kv_dim, a.kv_dim)
        if a.qkv_fused:
            self.qkv = nn.Linear(a.hidden, sum(widths), bias=a.qkv_bias)
            self.proj = nn.Linear(a.q_dim, a.hidden, bias=a.out_bias)
        else:
            self.q, self.k, self.v = (nn.Linear(a.hidden, w, bias=a.qkv_bias)
                                      for w in widths)
            self.o = nn.Linear(a.q_dim, a.hidden, bias=a.out_bias)
        if a.qk_norm:
            full = a.qk_norm_full
            self.q_norm = norm(a, a.q_dim if full else a.head_dim)
            self.k_norm = norm(a, a.kv_dim if full else a.head_dim)
        self.sinks = nn.Parameter(torch.zeros(a.heads)) if a.sinks else None

    def reset_parameters(self):     # the sinks (after a meta build)
        if self.sinks is not None:
            nn.init.zeros_(self.sinks)

    def forward(self, x):
        a, (b, s, _) = self.a, x.shape
        if a.qkv_fused:
            qkv = self.qkv(x).split((a.q_dim, a.kv_dim, a.kv_dim), dim=2)
        else:
            qkv = (self.q(x), self.k(x), self.v(x))
        if a.qk_norm_full:
            qkv = (self.q_norm(qkv[0]), self.k_norm(qkv[1]), qkv[2])
        q, k, v = (t.view(b, s, -1, a.head_dim).transpose(1, 2) for t in qkv)
        if a.qk_norm and not a.qk_norm_full:
            q, k = self.q_norm(q), self.k_norm(k)
        if a.positions == "rope":
            cos, sin = rope_tables(s, rotary_dims(a), a.rope_theta, q)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        k, v = repeat_kv(k, a.gqa_group), repeat_kv(v, a.gqa_group)
        y = self.attend(q, k, v)
        out = self.proj if a.qkv_fused else self.o
        return out(y.transpose(1, 2).reshape(b, s, a.q_dim))

    def attend(self, q, k, v):
        a, s = self.a, q.shape[2]
        if not (a.attn_softcap or a.sinks):
            if not self.window:
                return F.scaled_dot_product_attention(q, k, v,
                                                      is_causal=True)
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=visible(s, self.window, q.device))
        scores = q @ k.transpose(-2, -1) / math.sqrt(a.head_dim)
        if a.attn_softcap:
            scores = torch.tanh(scores / a.attn_softcap) * a.attn_softcap
        scores = scores.masked_fill(~visible(s, self.window, q.device),
                                    float("-inf"))
        if self.sinks is not None:   # one more column: the head's sink
            sink = self.sinks.to(scores.dtype).view(1, -1, 1, 1)
            scores = torch.cat((scores, sink.expand(*scores.shape[:3], 1)),
                               dim=-1)
        p = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        if self.sinks is not None:
            p = p[..., :-1]
        return p @ v


class CrossAttention(nn.Module):
    """Llama 3.2 Vision's cross-attention (``MllamaTextCrossAttention``;
    Dubey et al. 2024, "The Llama 3 Herd of Models", Sec. 7.2): queries
    from the text, keys and values from the image features (``hidden``
    wide), a norm over each query and key head, no positions, no mask."""

    def __init__(self, a):
        super().__init__()
        self.a = a
        self.q = nn.Linear(a.hidden, a.q_dim, bias=a.qkv_bias)
        self.k = nn.Linear(a.hidden, a.kv_dim, bias=a.qkv_bias)
        self.v = nn.Linear(a.hidden, a.kv_dim, bias=a.qkv_bias)
        self.o = nn.Linear(a.q_dim, a.hidden, bias=a.out_bias)
        self.q_norm = norm(a, a.head_dim)
        self.k_norm = norm(a, a.head_dim)

    def forward(self, x, images):
        a, (b, s, _), t = self.a, x.shape, images.shape[1]
        q = self.q_norm(self.q(x).view(b, s, -1, a.head_dim).transpose(1, 2))
        k, v = (p(images).view(b, t, -1, a.head_dim).transpose(1, 2)
                for p in (self.k, self.v))
        k = self.k_norm(k)
        k, v = repeat_kv(k, a.gqa_group), repeat_kv(v, a.gqa_group)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.o(y.transpose(1, 2).reshape(b, s, a.q_dim))
