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


def _mlp(p: str, h: int, f: int, a: Arch, bias=None) -> list:
    b = a.mlp_bias if bias is None else bias
    if a.mlp == "gelu":
        return (_linear(f"{p}.fc", h, f, b, "mlp") +
                _linear(f"{p}.proj", f, h, b, "mlp"))
    return (_linear(f"{p}.gate_proj", h, f, b, "mlp") +
            _linear(f"{p}.up_proj", h, f, b, "mlp") +
            _linear(f"{p}.down_proj", f, h, b, "mlp"))


def expert(p: str, a: Arch) -> list:
    """One routed expert (its biases: gpt-oss's ``expert_bias``)."""
    return _mlp(p, a.hidden, a.expert_ffn, a, a.mlp_bias or a.expert_bias)


def _norms(p: str, a: Arch) -> tuple:
    """The block's norms before attention and after it (Hugging Face's
    names): pre-norms (Llama), post-norms (OLMo 2), both (Gemma 2's
    sandwich: four), or one (parallel attention + MLP, Phi-1)."""
    h = a.hidden
    if a.parallel:
        return _norm(f"{p}.input_layernorm", h, a), []
    pre = [f"{p}.input_layernorm", f"{p}.post_attention_layernorm"]
    post = [f"{p}.post_attention_layernorm",
            f"{p}.post_feedforward_layernorm"]
    if a.pre_norms and a.post_norms:
        first = pre[:1] + post[:1]
        rest = [f"{p}.pre_feedforward_layernorm", post[1]]
    elif a.pre_norms:
        first, rest = pre[:1], pre[1:]
    else:
        first, rest = post[:1], post[1:]
    return ([t for n in first for t in _norm(n, h, a)],
            [t for n in rest for t in _norm(n, h, a)])


def cross_layer(a: Arch, i: int) -> list:
    """A gated cross-attention layer (Llama 3.2 Vision; Dubey et al. 2024,
    "The Llama 3 Herd of Models", Sec. 7.2): queries from the text, keys
    and values from the image features (``hidden`` wide), per-head q/k
    norms, a tanh gate of one scalar on attention and one on the MLP."""
    h, p = a.hidden, f"layers.{i}"
    t = _norm(f"{p}.input_layernorm", h, a)
    for proj, width in (("q", a.q_dim), ("k", a.kv_dim), ("v", a.kv_dim)):
        t += _linear(f"{p}.cross_attn.{proj}_proj", h, width, a.qkv_bias,
                     "attention")
    t += _linear(f"{p}.cross_attn.o_proj", a.q_dim, h, a.out_bias,
                 "attention")
    for q in ("q_norm", "k_norm"):
        t += [(n, s, "attention") for n, s, _ in
              _norm(f"{p}.cross_attn.{q}", a.head_dim, a)]
    t += [(f"{p}.cross_attn_{g}_gate", (1,), "attention")
          for g in ("attn", "mlp")]
    t += _norm(f"{p}.post_attention_layernorm", h, a)
    return t + _mlp(f"{p}.mlp", h, a.ffn, a)


def layer(a: Arch, i: int) -> list:
    """``(name, shape, component)`` of dense layer ``i``'s weights."""
    if i in a.cross_layers:
        return cross_layer(a, i)
    h, p = a.hidden, f"layers.{i}"
    t, rest = _norms(p, a)
    for proj, width in (("q", a.q_dim), ("k", a.kv_dim), ("v", a.kv_dim)):
        t += _linear(f"{p}.self_attn.{proj}_proj", h, width, a.qkv_bias,
                     "attention")
    t += _linear(f"{p}.self_attn.o_proj", a.q_dim, h, a.out_bias,
                 "attention")
    if a.qk_norm:   # per head, or over all heads (qk_norm_full)
        full = a.qk_norm_full
        for q, w in (("q_norm", a.q_dim), ("k_norm", a.kv_dim)):
            t += [(name, shape, "attention") for name, shape, _ in
                  _norm(f"{p}.self_attn.{q}", w if full else a.head_dim, a)]
    if a.sinks:     # one logit per head joins the softmax (gpt-oss)
        t.append((f"{p}.self_attn.sinks", (a.heads,), "attention"))
    t += rest
    if a.experts and i >= a.first_dense_layers:
        t += _linear(f"{p}.mlp.gate", h, a.experts, a.expert_bias, "mlp")
        for e in range(a.experts):
            t += expert(f"{p}.mlp.experts.{e}", a)
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
