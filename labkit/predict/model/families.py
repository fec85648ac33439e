"""The block variants of today's decoders, as fields of the architecture
record, and the ``config.json`` families that use them (pure Python).

    from labkit.arch import from_hf_config
    from_hf_config("tests/data/hf_configs_families/gemma2-9b.json").window
    python -m labkit params --hf-config gemma2-9b.json

Each variant is a field, so that an unseen family with the same features
is read by the same rule (:func:`labkit.predict.model.record.check_block`
keeps them honest):

- ``post_norms``: a norm on each branch's output before the residual add.
  With ``pre_norms`` too it is the "sandwich" of Gemma 2 (Gemma Team 2024,
  Sec. 2, "post-norm and pre-norm"; Ding et al. 2021, CogView's
  Sandwich-LN): four norms per block; alone (``pre_norms = False``) it is
  OLMo 2's reordered norm (OLMo et al. 2024, "2 OLMo 2 Furious", its
  architecture section): two norms, on the outputs;
- ``parallel``: attention and MLP read the same normed input and both add
  to the residual (GPT-J; PaLM, Chowdhery et al. 2022, Sec. 2): one norm
  per block (Phi-1, Gunasekar et al. 2023);
- ``qk_norm_full``: the query and key norms span all heads at once
  (``heads x head_dim`` and ``kv_heads x head_dim`` weights, OLMo 2's
  QK-norm) rather than one ``head_dim`` norm shared by every head;
- ``qkv_fused`` / ``mlp_fused``: Q, K, V (and gate, up) as one Linear
  (Phi-3, Abdin et al. 2024): the same weights, counted the same;
- ``sinks``: one learned logit per head per layer joins every softmax
  (gpt-oss model card, OpenAI 2025, Sec. 2.1; Xiao et al. 2023): ``heads``
  parameters a layer, no matrix multiply;
- ``expert_bias``: the router and every expert's projections have biases
  (gpt-oss): parameters, no matmul FLOPs;
- ``window`` / ``window_layers``: those layers attend to the last
  ``window`` tokens only (Mistral 7B, Jiang et al. 2023, Sec. 2; Gemma 2's
  alternating local and global layers): no bytes of weights; model FLOPs
  count every key as the masked eager build does, and
  ``windowed_model_flops`` a local layer's ``min(seq, window)`` keys;
- ``rotary_fraction`` (Phi-1's ``partial_rotary_factor``; GPT-NeoX), the
  soft-caps (Gemma 2, Sec. 2: ``cap tanh(x / cap)`` on scores and
  logits), Gemma's ``query_pre_attn_scalar`` and its embedding scaled by
  sqrt(hidden): element-wise, no parameters and no matmul FLOPs;
- ``mlp = "geglu"``: the gated MLP with a GELU gate (Shazeer 2020, Eq. 6),
  three matrices as SwiGLU;
- ``cross_layers``: gated cross-attention layers to the image features
  (Llama 3.2 Vision; Dubey et al. 2024, Sec. 7.2): the projections of a
  self-attention layer, per-head q/k norms and two one-scalar tanh gates.
  A text-only step skips them (transformers' ``MllamaTextModel``), so
  their FLOPs are not counted; with images they attend to the image
  tokens, which the record does not size. ``embed_extra``: embedding rows
  beyond the vocabulary (Llama 3.2 Vision: 8).
"""
from __future__ import annotations

from pathlib import Path

from labkit.predict.model.hf_fields import _bool, _float, _heads, _int, _seq
from labkit.predict.model.record import Arch

FAMILIES = ("gemma2", "gemma3_text", "phi3", "phi", "olmo2", "olmo3",
            "gpt_oss", "mllama_text_model")
LAYER_TYPES = ("full_attention", "sliding_attention")


def _cap(cfg: dict, key: str, default) -> float:
    v = cfg.get(key, default)
    if v is None:
        return 0.0
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        raise ValueError(f"config.json: {key!r} must be a positive number "
                         f"or null, got {v!r}")
    return float(v)


def _fraction(cfg: dict, default: float) -> float:
    v = cfg.get("partial_rotary_factor")
    rope = cfg.get("rope_parameters")
    if v is None and isinstance(rope, dict):
        v = rope.get("partial_rotary_factor")
    v = default if v is None else v
    if isinstance(v, bool) or not isinstance(v, (int, float)) \
            or not 0 < v <= 1:
        raise ValueError("config.json: 'partial_rotary_factor' must be in "
                         f"(0, 1], got {v!r}")
    return float(v)


def window(cfg: dict, layers: int, default_types) -> dict:
    """``window`` and ``window_layers`` from ``sliding_window`` and
    ``layer_types`` (or the family's default pattern, a function of the
    layer index, as transformers' config fills it)."""
    w = cfg.get("sliding_window")
    if w is None:
        return {}
    w = _int(cfg, "sliding_window")
    if not w:
        return {}
    types = cfg.get("layer_types")
    if types is None:
        types = [default_types(i) for i in range(layers)]
    if (not isinstance(types, list) or len(types) != layers
            or any(t not in LAYER_TYPES for t in types)):
        raise ValueError(f"config.json: 'layer_types' must list {layers} "
                         f"of {', '.join(LAYER_TYPES)}")
    local = tuple(i for i, t in enumerate(types)
                  if t == "sliding_attention")
    return dict(window=w, window_layers=local) if local else {}


def _every(i):
    return "sliding_attention"


def _shape(cfg: dict, kv_default, head_dim_default) -> dict:
    heads = _int(cfg, "num_attention_heads")
    hidden = _int(cfg, "hidden_size")
    kv = _int(cfg, "num_key_value_heads", kv_default or heads)
    if heads % kv:
        raise ValueError(f"config.json: 'num_key_value_heads' ({kv}) does "
                         f"not divide 'num_attention_heads' ({heads})")
    return dict(layers=_int(cfg, "num_hidden_layers"), hidden=hidden,
                heads=heads, vocab=_int(cfg, "vocab_size"),
                kv_heads=kv,
                head_dim=_heads(cfg, hidden, heads, head_dim_default),
                positions="rope",
                max_seq=_seq(cfg, "max_position_embeddings"))


def read(cfg: dict, source) -> Arch:
    kind = cfg["model_type"]
    name = Path(source).stem if not isinstance(source, dict) else kind
    return {"gemma2": _gemma, "gemma3_text": _gemma, "phi3": _phi3,
            "phi": _phi, "olmo2": _olmo, "olmo3": _olmo,
            "gpt_oss": _gpt_oss,
            "mllama_text_model": _mllama}[kind](cfg, kind, name)


def _rms(cfg, eps=1e-6) -> dict:
    return dict(norm="rmsnorm", norm_eps=_float(cfg, "rms_norm_eps", eps))


def _gemma(cfg, kind, name) -> Arch:
    """Gemma 2 / 3: GeGLU, sandwich norms, head_dim 256, tied, local
    layers alternating (Gemma 2) or five in six (Gemma 3), soft-caps
    (Gemma 2), per-head q/k norms (Gemma 3)."""
    if cfg.get("use_bidirectional_attention") is not None and _bool(
            cfg, "use_bidirectional_attention", False):   # bool | None
        raise ValueError("config.json: 'use_bidirectional_attention' true "
                         "is an encoder, not read here")
    s = _shape(cfg, 4, 256)
    every = _int(cfg, "sliding_window_pattern", 6) if kind != "gemma2" \
        else 2
    act = cfg.get("hidden_activation") or "gelu_pytorch_tanh"
    bias = _bool(cfg, "attention_bias", False)
    soft = kind == "gemma2"
    return Arch(**s, ffn=_int(cfg, "intermediate_size"),
                mlp="geglu" if "gelu" in act else "swiglu", **_rms(cfg),
                tied=_bool(cfg, "tie_word_embeddings", True),
                qkv_bias=bias, out_bias=bias, mlp_bias=False,
                post_norms=True, qk_norm=kind == "gemma3_text",
                attn_softcap=_cap(cfg, "attn_logit_softcapping",
                                  50.0 if soft else None),
                logit_softcap=_cap(cfg, "final_logit_softcapping",
                                   30.0 if soft else None),
                **window(dict({"sliding_window": 4096}, **cfg), s["layers"],
                         lambda i: "sliding_attention" if (i + 1) % every
                         else "full_attention"),
                name=name)


def _phi3(cfg, kind, name) -> Arch:
    s = _shape(cfg, None, None)
    return Arch(**s, ffn=_int(cfg, "intermediate_size"), mlp="swiglu",
                **_rms(cfg, 1e-5),
                tied=_bool(cfg, "tie_word_embeddings", False),
                qkv_fused=True, mlp_fused=True, qkv_bias=False,
                out_bias=False, mlp_bias=False,
                rotary_fraction=_fraction(cfg, 1.0),
                **window(cfg, s["layers"], _every), name=name)


def _phi(cfg, kind, name) -> Arch:
    s = _shape(cfg, None, None)
    return Arch(**s, ffn=_int(cfg, "intermediate_size"), mlp="gelu",
                norm="layernorm",
                norm_eps=_float(cfg, "layer_norm_eps", 1e-5),
                tied=_bool(cfg, "tie_word_embeddings", False),
                parallel=True, head_bias=True,
                qk_norm=_bool(cfg, "qk_layernorm", False),
                rotary_fraction=_fraction(cfg, 0.5), name=name)


def _olmo(cfg, kind, name) -> Arch:
    s = _shape(cfg, None, None)
    bias = _bool(cfg, "attention_bias", False)
    local = {}
    if kind == "olmo3":
        local = window(dict({"sliding_window": 4096}, **cfg), s["layers"],
                       lambda i: "sliding_attention" if (i + 1) % 4
                       else "full_attention")
    return Arch(**s, ffn=_int(cfg, "intermediate_size"), mlp="swiglu",
                **_rms(cfg), tied=_bool(cfg, "tie_word_embeddings", False),
                qkv_bias=bias, out_bias=bias, mlp_bias=False,
                pre_norms=False, post_norms=True, qk_norm=True,
                qk_norm_full=True, **local, name=name)


def _gpt_oss(cfg, kind, name) -> Arch:
    s = _shape(cfg, 8, 64)
    f = _int(cfg, "intermediate_size")
    bias = _bool(cfg, "attention_bias", True)
    return Arch(**s, ffn=f, mlp="swiglu", **_rms(cfg, 1e-5),
                tied=_bool(cfg, "tie_word_embeddings", False),
                qkv_bias=bias, out_bias=bias, mlp_bias=False,
                experts=_int(cfg, "num_local_experts"),
                top_k=_int(cfg, "num_experts_per_tok"), expert_ffn=f,
                norm_topk=True, sinks=True, expert_bias=True,
                **window(dict({"sliding_window": 128}, **cfg), s["layers"],
                         lambda i: "sliding_attention" if (i + 1) % 2
                         else "full_attention"),
                name=name)


def _mllama(cfg, kind, name) -> Arch:
    """Llama 3.2 Vision's language model: Llama 3 with gated
    cross-attention layers (``cross_attention_layers``) and 8 embedding
    rows beyond the vocabulary (``MllamaTextModel``)."""
    s = _shape(cfg, 8, None)
    cross = cfg.get("cross_attention_layers")
    if cross is None:         # MllamaTextConfig's default
        cross = [3, 8, 13, 18, 23, 28, 33, 38]
    if not isinstance(cross, list) or any(
            isinstance(i, bool) or not isinstance(i, int)
            or not 0 <= i < s["layers"] for i in cross):
        raise ValueError("config.json: 'cross_attention_layers' must list "
                         f"layer indices below {s['layers']}")
    return Arch(**s, ffn=_int(cfg, "intermediate_size"), mlp="swiglu",
                **_rms(cfg, 1e-5),
                tied=_bool(cfg, "tie_word_embeddings", False),
                qkv_bias=False, out_bias=False, mlp_bias=False,
                cross_layers=tuple(sorted(set(cross))), embed_extra=8,
                name=name)
