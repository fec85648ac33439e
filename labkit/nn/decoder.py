"""A decoder built from an architecture record: the course's GPT and the
Llama-style block (GQA, SwiGLU, RMSNorm, RoPE) in one set of modules.

    from labkit import arch
    from labkit.nn.model import build_arch
    m = build_arch(arch.preset("llama-tiny"))      # trains on CPU
    python -m labkit.nn llama-tiny            # size and one loss

Every field of :class:`labkit.arch.Arch` picks a piece: ``mlp`` GELU (two
matrices with biases) or SwiGLU (gate, up, down; Shazeer 2020, Eq. 6);
``norm`` LayerNorm or RMSNorm (Zhang & Sennrich 2019); ``positions`` a
learned table or rotary embeddings (Su et al. 2021, Eq. 34, in the
"rotate half" layout of Hugging Face's Llama); ``kv_heads`` < ``heads``
grouped-query attention (Ainslie et al. 2023), each K/V head repeated for
its ``heads / kv_heads`` query heads before SDPA (``repeat_kv``); ``qk_norm``
an RMSNorm over each query and key head (Qwen3). Its parameters are
exactly :func:`labkit.predict.model.params.tensors` (the tests hold
``sum(p.numel())`` to it for every preset and test config). The course's
GPT (:class:`labkit.nn.model.GPT`) is this decoder on the record's GPT preset
(GELU MLP with biases ``fc``/``proj``, LayerNorm, learned positions, one
fused ``qkv``). The root has three kinds of children -- ``embed``,
``blocks``, ``head`` -- the units FSDP wraps, and no parameter of its own.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from labkit.arch import Arch
from labkit.nn.mlp import MLP  # noqa: F401  (labkit.nn.decoder.MLP)


def record(a) -> Arch:
    """``a`` itself, or the record of a :class:`labkit.nn.model.GPTConfig`
    (so ``Block(GPTConfig())`` builds one block of the course's GPT)."""
    if isinstance(a, Arch):
        return a
    from dataclasses import asdict   # labkit.nn.model.arch_of, which
    from labkit import arch          # imports this module: not from there
    return arch.of_shape(**asdict(a))


def _norm(a: Arch, width: int) -> nn.Module:
    if a.norm == "rmsnorm":
        return nn.RMSNorm(width, eps=a.norm_eps)
    return nn.LayerNorm(width, eps=a.norm_eps)


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
    """Rotary positions on ``x`` of shape ``[b, heads, s, d]``."""
    d = x.shape[-1]
    x1, x2 = x[..., :d // 2], x[..., d // 2:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def repeat_kv(x, group: int):
    """``[b, kv_heads, s, d]`` -> ``[b, kv_heads * group, s, d]`` (one
    copy, as Hugging Face's ``repeat_kv``; SDPA saves the copies)."""
    if group == 1:
        return x
    b, kv, s, d = x.shape
    return x[:, :, None].expand(b, kv, group, s, d).reshape(b, kv * group,
                                                            s, d)


class Embeddings(nn.Module):
    def __init__(self, a: Arch):
        super().__init__()
        a = record(a)
        self.tok = nn.Embedding(a.vocab, a.hidden)
        self.pos = (nn.Embedding(a.max_seq, a.hidden)
                    if a.positions == "learned" else None)

    def forward(self, idx):
        x = self.tok(idx)
        if self.pos is not None:
            x = x + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return x


class Attention(nn.Module):
    """Causal self-attention. ``qkv_fused``: one ``qkv`` Linear and the
    output ``proj`` (the GPT's names, which its tensor-parallel runs and
    checkpoints use); otherwise ``q``, ``k``, ``v`` and ``o``."""

    def __init__(self, a: Arch):
        super().__init__()
        a = record(a)
        self.a = a
        widths = (a.q_dim, a.kv_dim, a.kv_dim)
        if a.qkv_fused:
            self.qkv = nn.Linear(a.hidden, sum(widths), bias=a.qkv_bias)
            self.proj = nn.Linear(a.q_dim, a.hidden, bias=a.out_bias)
        else:
            self.q, self.k, self.v = (nn.Linear(a.hidden, w, bias=a.qkv_bias)
                                      for w in widths)
            self.o = nn.Linear(a.q_dim, a.hidden, bias=a.out_bias)
        if a.qk_norm:
            self.q_norm = nn.RMSNorm(a.head_dim, eps=a.norm_eps)
            self.k_norm = nn.RMSNorm(a.head_dim, eps=a.norm_eps)

    def forward(self, x):
        a, (b, s, _) = self.a, x.shape
        if a.qkv_fused:
            qkv = self.qkv(x).split((a.q_dim, a.kv_dim, a.kv_dim), dim=2)
        else:
            qkv = (self.q(x), self.k(x), self.v(x))
        q, k, v = (t.view(b, s, -1, a.head_dim).transpose(1, 2) for t in qkv)
        if a.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if a.positions == "rope":
            cos, sin = rope_tables(s, a.head_dim, a.rope_theta, q)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        k, v = repeat_kv(k, a.gqa_group), repeat_kv(v, a.gqa_group)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out = self.proj if a.qkv_fused else self.o
        return out(y.transpose(1, 2).reshape(b, s, a.q_dim))


from labkit.nn.moe.layer import MoE  # noqa: E402  router, capacity, shared


class Block(nn.Module):
    def __init__(self, a: Arch, i: int = 0):
        super().__init__()
        a = record(a)
        self.ln1 = _norm(a, a.hidden)
        self.attn = Attention(a)
        self.ln2 = _norm(a, a.hidden)
        moe = a.experts and i >= a.first_dense_layers
        self.mlp = MoE(a) if moe else MLP(a, a.ffn)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Head(nn.Module):
    def __init__(self, a: Arch):
        super().__init__()
        a = record(a)
        self.ln_f = _norm(a, a.hidden) if a.final_norm else nn.Identity()
        self.out = nn.Linear(a.hidden, a.vocab, bias=False)

    def forward(self, x):
        return self.out(self.ln_f(x))


class Decoder(nn.Module):
    recompute = False  # full activation recomputation, block by block

    def __init__(self, a: Arch):
        super().__init__()
        a = record(a)
        if a.extras:    # the record counts them; this block does not build
            raise ValueError(
                f"{a.name or 'this model'} has {', '.join(a.extras)}: the "
                "course's decoder block does not build them (python -m "
                "labkit build measures the model transformers builds)")
        self.arch = a
        self.embed = Embeddings(a)
        self.blocks = nn.ModuleList(Block(a, i) for i in range(a.layers))
        self.head = Head(a)
        self.apply(init_weights)
        if a.tied:
            self.head.out.weight = self.embed.tok.weight

    def forward(self, idx, targets=None):
        x = self.embed(idx)
        for block in self.blocks:
            x = recomputed(block, x) if self.recompute else block(x)
        logits = self.head(x)
        if targets is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1).float(),
                               targets.flatten())


def recomputed(block: nn.Module, x):
    """``block(x)`` keeping only its input for backward; the forward runs
    again during backward (full recomputation, Korthikanti et al. 2022,
    Sec. 5: 2 s b h bytes per layer in 16-bit instead of 34 s b h + ...)."""
    from torch.utils.checkpoint import checkpoint
    if not torch.is_grad_enabled():
        return block(x)
    return checkpoint(block, x, use_reentrant=False)


def init_weights(m):
    """GPT-2's initialisation of one module (normal, std 0.02; zero
    biases); the norms keep their own ones and zeros."""
    if isinstance(m, (nn.Linear, nn.Embedding)):
        nn.init.normal_(m.weight, std=0.02)
        if getattr(m, "bias", None) is not None:
            nn.init.zeros_(m.bias)
