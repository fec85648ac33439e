"""The decoder's MLP, read from the architecture record: SwiGLU (gate,
up, down; Shazeer 2020, Eq. 6), GeGLU (the same three with a GELU gate,
tanh approximation: Gemma, ``gelu_pytorch_tanh``) or GELU (fc, proj;
Radford et al. 2019), biases only where the record has them. With
``mlp_fused`` the gate and up projections are one Linear of twice the
width, split in half after it (Phi-3, ``modeling_phi3.py``: ``gate_up``
then ``chunk(2)``). A dense block's MLP and each expert of a mixture of
experts (:mod:`labkit.nn.moe.layer`) are this module.

    from labkit import arch
    from labkit.nn.mlp import MLP
    a = arch.preset("llama-tiny")
    mlp = MLP(a, a.ffn)
"""
from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    """Gated: ``gate``, ``up`` (or one ``gate_up``), ``down``; GELU:
    ``fc``, ``proj`` (the GPT's names, which its tensor-parallel runs and
    checkpoints use). ``bias``: the record's ``mlp_bias`` unless given
    (an expert of gpt-oss has biases where its dense MLP has none)."""

    def __init__(self, a, ffn: int, bias: bool | None = None):
        super().__init__()
        b = a.mlp_bias if bias is None else bias
        self.swiglu = a.mlp == "swiglu"   # the gate's function: SiLU
        self.gated = a.mlp != "gelu"
        self.fused = self.gated and a.mlp_fused
        if self.fused:
            self.gate_up = nn.Linear(a.hidden, 2 * ffn, bias=b)
        elif self.gated:
            self.gate = nn.Linear(a.hidden, ffn, bias=b)
            self.up = nn.Linear(a.hidden, ffn, bias=b)
        if self.gated:
            self.down = nn.Linear(ffn, a.hidden, bias=b)
        else:
            self.fc = nn.Linear(a.hidden, ffn, bias=b)
            self.proj = nn.Linear(ffn, a.hidden, bias=b)

    def forward(self, x):
        if not self.gated:
            return self.proj(F.gelu(self.fc(x)))
        if self.fused:
            gate, up = self.gate_up(x).chunk(2, dim=-1)
        else:
            gate, up = self.gate(x), self.up(x)
        act = (F.silu(gate) if self.swiglu
               else F.gelu(gate, approximate="tanh"))
        return self.down(act * up)
