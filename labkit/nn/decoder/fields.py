"""What every part of the decoder reads first: the architecture record
(or a :class:`labkit.nn.model.GPTConfig`, turned into one) and the norm
it names (LayerNorm, or RMSNorm: Zhang & Sennrich 2019).
"""
from __future__ import annotations

import torch.nn as nn

from labkit.arch import Arch


def record(a) -> Arch:
    """``a`` itself, or the record of a :class:`labkit.nn.model.GPTConfig`
    (so ``Block(GPTConfig())`` builds one block of the course's GPT)."""
    if isinstance(a, Arch):
        return a
    from dataclasses import asdict   # labkit.nn.model.arch_of, which
    from labkit import arch          # imports this package: not from there
    return arch.of_shape(**asdict(a))


def norm(a: Arch, width: int) -> nn.Module:
    """The record's norm over ``width`` features."""
    if a.norm == "rmsnorm":
        return nn.RMSNorm(width, eps=a.norm_eps)
    return nn.LayerNorm(width, eps=a.norm_eps)
