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
  (default ``4 n_embd``), LayerNorms and biases everywhere, tied output.

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
        raise ValueError(str(e).replace(
            "config.json", f"--hf-config {source}", 1)) from None


def _read(source) -> Arch:
    cfg = _load(source)
    for key in EXPERT_KEYS:   # before the family: the key is the problem
        if cfg.get(key) and "num_experts_per_tok" not in cfg:
            raise ValueError(f"config.json has {key!r} (a mixture of "
                             "experts) but no 'num_experts_per_tok'")
    kind = cfg.get("model_type")
    from labkit.predict.model import (  # the MoE families live apart
        hf_config_moe)
    if kind in hf_config_moe.FAMILIES:
        return hf_config_moe.read(cfg, source)
    if kind not in FAMILIES:
        raise ValueError(f"config.json: model_type {kind!r} is not "
                         f"supported (supported: {', '.join(FAMILIES)}; "
                         f"experts: {', '.join(hf_config_moe.FAMILIES)})")
    name = Path(source).stem if not isinstance(source, dict) else kind
    if kind == "gpt2":
        return _gpt2(cfg, name)
    return _llama_like(cfg, kind, name)


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
    return Arch(
        layers, hidden, heads, vocab, ffn=ffn, kv_heads=kv,
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
