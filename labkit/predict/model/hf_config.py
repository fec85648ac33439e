"""Read a Hugging Face ``config.json`` into an :class:`labkit.arch.Arch`
(pure Python: the file is read, nothing is downloaded).

    from labkit.arch import from_hf_config
    from_hf_config("config.json")          # or a dict
    python -m labkit params --hf-config config.json

The keys and their meaning follow ``transformers``' own classes
(``LlamaConfig``, ``MistralConfig``, ``Qwen2Config``, ``Qwen3Config``,
``GPT2Config``) and modelling files, including what a config does not say:

- llama: ``head_dim`` defaults to ``hidden_size / num_attention_heads``,
  ``num_key_value_heads`` to ``num_attention_heads``, ``attention_bias``
  (Q, K, V and O) and ``mlp_bias`` to false;
- mistral: the same, but ``num_key_value_heads`` defaults to 8;
- qwen2: Q, K and V have biases and O none, whatever the config says
  (``Qwen2Attention`` hard-codes ``bias=True`` for them);
- qwen3: an RMSNorm of ``head_dim`` on every query and key head
  (``q_norm``, ``k_norm``), ``head_dim`` defaults to 128;
- gpt2: ``n_layer``, ``n_embd``, ``n_head``, ``n_positions``, ``n_inner``
  (default ``4 n_embd``), LayerNorms and biases everywhere, tied output;
- Gemma 2/3, Phi-3, Phi-1/2, OLMo 2/3 and gpt-oss: their block variants
  (sandwich and post norms, parallel attention, q/k norms over all heads,
  sinks, expert biases, sliding windows) are fields of the record, read by
  :mod:`labkit.predict.model.families`; the experts' families by
  :mod:`labkit.predict.model.hf_config_moe`;
- an image-text config (Qwen2.5-VL, Qwen3-VL, Gemma 3, Llama 3.2
  Vision): its
  ``text_config``, the language model, named ``multimodal``; the vision
  tower is not in the record (``python -m labkit build`` counts it).

The shape keys (layers, width, heads, FFN width, vocabulary) have no
default here: a config that lacks one is an error that names it, rather
than a 7B model nobody asked for. Every number is checked as the flag it
stands for is (``labkit.cli_rules.value``, :data:`labkit.cli_rules.HF_KEYS`):
``"num_hidden_layers": 1e12`` is one line naming the key and the file.
A boolean must be JSON ``true``/``false``, as transformers 5's strict
configs require (``"false"`` is refused, never read as true); a key set
to null takes transformers' default (GPT-2's ``n_inner: null`` is
``4 n_embd``), except a shape key, which has none.
"""
from __future__ import annotations

import json
from pathlib import Path

from labkit.predict.model.hf_fields import _bool, _float, _heads, _int, _seq
from labkit.predict.model.record import Arch

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gpt2")


class UnknownFamily(ValueError):
    """A ``model_type`` the record does not read (``model_type``): the
    command line then answers from transformers' own build
    (:mod:`labkit.measure.hf_build.unknown`), saying so."""

    def __init__(self, message: str, model_type, source):
        super().__init__(message)
        self.model_type, self.source = model_type, source
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")


def _load(source) -> dict:
    if isinstance(source, dict):
        return source
    path = Path(source)
    if not path.is_file():
        raise ValueError(f"--hf-config {source}: no such file")
    try:
        cfg = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"--hf-config {source}: not JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"--hf-config {source}: not a JSON object")
    return cfg


def read(source) -> Arch:
    """The record of ``source``; ValueError in one line naming the key
    and the file."""
    try:
        return _read(source)
    except ValueError as e:
        if isinstance(source, dict):
            raise
        said = str(e).replace("config.json", f"--hf-config {source}", 1)
        if isinstance(e, UnknownFamily):
            raise UnknownFamily(said, e.model_type, source) from None
        raise ValueError(said) from None


def _read(source) -> Arch:
    cfg = _load(source)
    from labkit.predict.model import (  # the MoE families live apart
        families, hf_config_moe)
    kind = cfg.get("model_type")
    multimodal = isinstance(cfg.get("text_config"), dict)
    known = multimodal or kind in (FAMILIES + families.FAMILIES
                                   + hf_config_moe.FAMILIES)
    for key in EXPERT_KEYS:   # before the family: the key is the problem
        if known and cfg.get(key) and "num_experts_per_tok" not in cfg:
            raise ValueError(f"config.json has {key!r} (a mixture of "
                             "experts) but no 'num_experts_per_tok'")
    if multimodal:
        return _language_model(cfg, source)
    if kind in hf_config_moe.FAMILIES:
        return hf_config_moe.read(cfg, source)
    if kind in families.FAMILIES:
        return families.read(cfg, source)
    if kind not in FAMILIES:
        raise UnknownFamily(
            f"config.json: model_type {kind!r} is not supported "
            f"(supported: {', '.join(FAMILIES + families.FAMILIES)}; "
            f"experts: {', '.join(hf_config_moe.FAMILIES)}; or a "
            "text_config of one; 'python -m labkit build' measures any)",
            kind, source)
    name = Path(source).stem if not isinstance(source, dict) else kind
    if kind == "gpt2":
        return _gpt2(cfg, name)
    return _llama_like(cfg, kind, name)


# a multimodal config's language model: its text_config's model_type, read
# as the family whose modelling file it reuses
TEXT = {"qwen2_vl_text": "qwen2", "qwen2_5_vl_text": "qwen2",
        "qwen3_vl_text": "qwen3", "gemma3_text": "gemma3_text",
        "mllama_text_model": "mllama_text_model"}


def _language_model(cfg: dict, source) -> Arch:
    """The language model of an image-text config (``text_config``), the
    vision tower left out and named (``multimodal``): Qwen2.5-VL, Qwen3-VL
    and Gemma 3 reuse Qwen2's, Qwen3's and Gemma 3's decoder; Llama 3.2
    Vision's is Llama 3's with cross-attention layers."""
    kind = cfg.get("model_type")
    text = dict(cfg["text_config"])
    sub = text.get("model_type")
    if sub not in TEXT:
        raise UnknownFamily(f"config.json: model_type {kind!r}: its "
                            f"text_config's model_type {sub!r} is not "
                            f"supported (supported: {', '.join(TEXT)})",
                            kind, source)
    text["model_type"] = TEXT[sub]
    if "tie_word_embeddings" not in text and "tie_word_embeddings" in cfg:
        text["tie_word_embeddings"] = cfg["tie_word_embeddings"]
    name = Path(source).stem if not isinstance(source, dict) else kind
    return _read(text).with_(name=name, multimodal=kind)


def _llama_like(cfg: dict, kind: str, name: str) -> Arch:
    layers = _int(cfg, "num_hidden_layers")
    hidden = _int(cfg, "hidden_size")
    heads = _int(cfg, "num_attention_heads")
    ffn = _int(cfg, "intermediate_size")
    vocab = _int(cfg, "vocab_size")
    kv = _int(cfg, "num_key_value_heads", 8 if kind == "mistral" else heads)
    if heads % kv:
        raise ValueError(f"config.json: 'num_key_value_heads' ({kv}) does "
                         f"not divide 'num_attention_heads' ({heads})")
    head_dim = _heads(cfg, hidden, heads, 128 if kind == "qwen3" else None)
    attn_bias = _bool(cfg, "attention_bias", False)
    qkv_bias = True if kind == "qwen2" else attn_bias
    out_bias = False if kind == "qwen2" else attn_bias
    mlp_bias = _bool(cfg, "mlp_bias", False) if kind == "llama" else False
    experts = top_k = 0
    for key in EXPERT_KEYS:
        if cfg.get(key):
            experts = _int(cfg, key)
            top_k = _int(cfg, "num_experts_per_tok")
    if experts:
        raise ValueError(f"config.json: a {kind} config with {experts} "
                         "experts is not a family supported here "
                         f"(supported: {', '.join(FAMILIES)}, dense)")
    from labkit.predict.model.families import window
    qwen = kind in ("qwen2", "qwen3")
    on = kind == "mistral" or (qwen and cfg.get("use_sliding_window") is True)
    local = window(cfg if on else {}, layers,
        lambda i: "sliding_attention" if not qwen or i >= cfg.get(
            "max_window_layers", 0) else "full_attention")
    return Arch(
        layers, hidden, heads, vocab, ffn=ffn, kv_heads=kv, **local,
        head_dim=head_dim, mlp="swiglu", norm="rmsnorm",
        qk_norm=kind == "qwen3", positions="rope",
        max_seq=_seq(cfg, "max_position_embeddings"),
        tied=_bool(cfg, "tie_word_embeddings", False),
        qkv_bias=qkv_bias, out_bias=out_bias, mlp_bias=mlp_bias,
        norm_eps=_float(cfg, "rms_norm_eps", 1e-6),
        rope_theta=_float(cfg, "rope_theta", 10000.0),
        experts=experts, top_k=top_k, name=name)


def _gpt2(cfg: dict, name: str) -> Arch:
    hidden = _int(cfg, "n_embd")
    heads = _int(cfg, "n_head")
    if hidden % heads:
        raise ValueError(f"config.json: 'n_head' ({heads}) does not divide "
                         f"'n_embd' ({hidden})")
    return Arch(
        _int(cfg, "n_layer"), hidden, heads, _int(cfg, "vocab_size"),
        ffn=_int(cfg, "n_inner", 4 * hidden),
        max_seq=_int(cfg, "n_positions"),
        tied=_bool(cfg, "tie_word_embeddings", True),
        norm_eps=_float(cfg, "layer_norm_epsilon", 1e-5), name=name)
