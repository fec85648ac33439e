"""The weight tensors of one dense decoder layer, in Hugging Face's order
and names: norms, linears, the MLP, and their element counts. The pieces
that :mod:`labkit.predict.model.params` and
:mod:`labkit.predict.model.params_moe` both build on (pure Python).
"""
from __future__ import annotations

from labkit.predict.model.record import Arch


def _norm(name: str, width: int, a: Arch) -> list:
    out = [(f"{name}.weight", (width,), "norms")]
    if a.norm == "layernorm":
        out.append((f"{name}.bias", (width,), "norms"))
    return out


def _linear(name: str, n_in: int, n_out: int, bias: bool, part: str):
    out = [(f"{name}.weight", (n_out, n_in), part)]
    if bias:
        out.append((f"{name}.bias", (n_out,), part))
    return out


def _mlp(p: str, h: int, f: int, a: Arch) -> list:
    if a.mlp == "gelu":
        return (_linear(f"{p}.fc", h, f, a.mlp_bias, "mlp") +
                _linear(f"{p}.proj", f, h, a.mlp_bias, "mlp"))
    return (_linear(f"{p}.gate_proj", h, f, a.mlp_bias, "mlp") +
            _linear(f"{p}.up_proj", h, f, a.mlp_bias, "mlp") +
            _linear(f"{p}.down_proj", f, h, a.mlp_bias, "mlp"))


def layer(a: Arch, i: int) -> list:
    """``(name, shape, component)`` of dense layer ``i``'s weights."""
    h, p = a.hidden, f"layers.{i}"
    t = _norm(f"{p}.input_layernorm", h, a)
    for proj, width in (("q", a.q_dim), ("k", a.kv_dim), ("v", a.kv_dim)):
        t += _linear(f"{p}.self_attn.{proj}_proj", h, width, a.qkv_bias,
                     "attention")
    t += _linear(f"{p}.self_attn.o_proj", a.q_dim, h, a.out_bias,
                 "attention")
    if a.qk_norm:
        t += [(name, shape, "attention") for q in ("q_norm", "k_norm")
              for name, shape, _ in _norm(f"{p}.self_attn.{q}",
                                          a.head_dim, a)]
    t += _norm(f"{p}.post_attention_layernorm", h, a)
    if a.experts and i >= a.first_dense_layers:
        t += _linear(f"{p}.mlp.gate", h, a.experts, False, "mlp")
        for e in range(a.experts):
            t += _mlp(f"{p}.mlp.experts.{e}", h, a.expert_ffn, a)
        for e in range(a.shared_experts):
            t += _mlp(f"{p}.mlp.shared_experts.{e}", h, a.expert_ffn, a)
    else:
        t += _mlp(f"{p}.mlp", h, a.ffn, a)
    return t


def numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _sum(ts, part=None) -> int:
    return sum(numel(s) for _, s, c in ts if part in (None, c))
