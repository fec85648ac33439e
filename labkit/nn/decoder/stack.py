"""The whole decoder: embeddings, the layers, the head -- the three kinds
of children FSDP wraps (the root holds no parameter of its own).

    from labkit import arch
    from labkit.nn.model import build_arch
    m = build_arch(arch.preset("llama-tiny"))      # trains on CPU

- ``Embeddings``: the token table (``vocab + embed_extra`` rows: Llama
  3.2 Vision has 8 beyond the vocabulary, ``MllamaTextModel``) and, for
  ``positions = "learned"``, the position table;
- ``Head``: the final norm, the output layer (its bias: ``head_bias``,
  Phi-1's ``lm_head``) and the final soft-cap ``cap tanh(logits / cap)``
  (Gemma 2, Gemma Team 2024, Sec. 2; ``Gemma2ForCausalLM``);
- ``Decoder``: a :class:`~labkit.nn.decoder.block.Block` per layer, a
  :class:`~labkit.nn.decoder.block.CrossBlock` at ``cross_layers``, which a
  text-only step skips as ``MllamaTextModel`` does (their parameters are
  built and held; they get no gradient in such a step).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from labkit.nn.decoder.block import Block, CrossBlock
from labkit.nn.decoder.fields import norm, record


class Embeddings(nn.Module):
    def __init__(self, a):
        super().__init__()
        a = record(a)
        self.tok = nn.Embedding(a.vocab + a.embed_extra, a.hidden)
        self.pos = (nn.Embedding(a.max_seq, a.hidden)
                    if a.positions == "learned" else None)

    def forward(self, idx):
        x = self.tok(idx)
        if self.pos is not None:
            x = x + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return x


class Head(nn.Module):
    def __init__(self, a):
        super().__init__()
        a = record(a)
        self.cap = a.logit_softcap
        self.ln_f = norm(a, a.hidden) if a.final_norm else nn.Identity()
        self.out = nn.Linear(a.hidden, a.vocab, bias=a.head_bias)

    def forward(self, x):
        y = self.out(self.ln_f(x))
        return torch.tanh(y / self.cap) * self.cap if self.cap else y


class Decoder(nn.Module):
    recompute = False  # full activation recomputation, block by block

    def __init__(self, a):
        super().__init__()
        a = record(a)
        if a.tied and a.embed_extra:
            raise ValueError("tied embeddings with embed_extra rows: the "
                             "head would not be the token table")
        self.arch = a
        self.embed = Embeddings(a)
        self.blocks = nn.ModuleList(
            CrossBlock(a, i) if i in a.cross_layers else Block(a, i)
            for i in range(a.layers))
        self.head = Head(a)
        self.apply(init_weights)
        if a.tied:
            self.head.out.weight = self.embed.tok.weight

    def forward(self, idx, targets=None):
        x = self.embed(idx)
        skip = self.arch.cross_layers   # text only: no image states
        for i, block in enumerate(self.blocks):
            if i in skip:
                continue
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
    biases); the norms keep their own ones and zeros, the sinks and the
    cross-attention gates their zeros."""
    if isinstance(m, (nn.Linear, nn.Embedding)):
        nn.init.normal_(m.weight, std=0.02)
        if getattr(m, "bias", None) is not None:
            nn.init.zeros_(m.bias)
