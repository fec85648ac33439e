"""The decoder's MLP, read from the architecture record: SwiGLU (gate,
up, down; Shazeer 2020, Eq. 6) or GELU (fc, proj; Radford et al. 2019),
biases only where the record has them. A dense block's MLP and each
expert of a mixture of experts (:mod:`labkit.nn.moe.layer`) are this module.

    from labkit import arch
    from labkit.nn.mlp import MLP
    a = arch.preset("llama-tiny")
    mlp = MLP(a, a.ffn)
"""
from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    """SwiGLU: ``gate``, ``up``, ``down``; GELU: ``fc``, ``proj`` (the
    GPT's names, which its tensor-parallel runs and checkpoints use)."""

    def __init__(self, a, ffn: int):
        super().__init__()
        self.swiglu = a.mlp == "swiglu"
        if self.swiglu:
            self.gate = nn.Linear(a.hidden, ffn, bias=a.mlp_bias)
            self.up = nn.Linear(a.hidden, ffn, bias=a.mlp_bias)
            self.down = nn.Linear(ffn, a.hidden, bias=a.mlp_bias)
        else:
            self.fc = nn.Linear(a.hidden, ffn, bias=a.mlp_bias)
            self.proj = nn.Linear(ffn, a.hidden, bias=a.mlp_bias)

    def forward(self, x):
        if self.swiglu:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.proj(F.gelu(self.fc(x)))
