"""Read the mixture-of-experts families of Hugging Face ``config.json``
into the architecture record (pure Python; :mod:`labkit.hf_config` hands
these families here).

    from labkit.arch import from_hf_config
    from_hf_config("tests/data/hf_configs_moe/deepseek-v3.json")
    python -m labkit params --hf-config mixtral-8x7b.json --json

What each family's config says, and what transformers' modelling file
adds that the config does not (``MixtralConfig``, ``Qwen2MoeConfig``,
``Qwen3MoeConfig``, ``DeepseekV3Config``):

- mixtral: ``num_local_experts`` SwiGLU experts of width
  ``intermediate_size``, ``num_experts_per_tok`` per token, softmax router,
  the top-k weights renormalised; Mistral attention (GQA, no biases);
  defaults ``rope_theta = 1e6``, ``rms_norm_eps = 1e-5``;
- qwen2_moe: ``num_experts`` of width ``moe_intermediate_size``, one shared
  expert of width ``shared_expert_intermediate_size`` behind a sigmoid gate
  (``shared_expert_gate``), ``norm_topk_prob`` (default false), Q/K/V
  biases when ``qkv_bias`` (default true);
- qwen3_moe: Qwen3 attention (q/k RMSNorm; ``head_dim`` defaults to
  ``hidden / heads`` here, unlike qwen3's 128), no
  shared expert;
- deepseek_v3: multi-head latent attention (``q_lora_rank``,
  ``kv_lora_rank``, ``qk_rope_head_dim``, ``qk_nope_head_dim``,
  ``v_head_dim``), ``n_routed_experts`` of width ``moe_intermediate_size``,
  ``n_shared_experts`` as one MLP, the first ``first_k_dense_replace``
  layers dense (width ``intermediate_size``), sigmoid router,
  ``routed_scaling_factor``, node-limited routing (``n_group``,
  ``topk_group``). The multi-token-prediction module
  (``num_nextn_predict_layers``) is not part of the model transformers
  builds, nor of this record (Liu et al. 2024, Sec. 2.2: 14B more).

Only every-layer MoE is read (``decoder_sparse_step = 1``,
``mlp_only_layers`` empty, ``moe_layer_freq = 1``); another pattern is an
error that names its key.
"""
from __future__ import annotations

from pathlib import Path

from labkit.predict.model.hf_fields import _bool, _float, _heads, _seq
from labkit.predict.model.hf_fields import _int as positive
from labkit.predict.model.record import Arch

FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3")


def _int(cfg, key, default=None, low=1):
    v = cfg.get(key)
    v = default if v is None else v
    if low == 0 and v == 0 and not isinstance(v, bool):
        return 0
    return positive({key: v}, key)


def _every_layer(cfg: dict) -> None:
    for key, ok in (("decoder_sparse_step", 1), ("moe_layer_freq", 1)):
        if cfg.get(key, ok) != ok:
            raise ValueError(f"config.json: {key!r} = {cfg[key]!r}: only "
                             f"MoE in every layer ({key} = 1) is read here")
    if cfg.get("mlp_only_layers"):
        raise ValueError("config.json: 'mlp_only_layers' is not empty: "
                         "only MoE in every layer is read here")


def read(cfg: dict, source) -> Arch:
    kind = cfg["model_type"]
    name = Path(source).stem if not isinstance(source, dict) else kind
    _every_layer(cfg)
    common = dict(
        layers=_int(cfg, "num_hidden_layers"),
        hidden=_int(cfg, "hidden_size"),
        heads=_int(cfg, "num_attention_heads"),
        vocab=_int(cfg, "vocab_size"),
        ffn=_int(cfg, "intermediate_size"),
        top_k=_int(cfg, "num_experts_per_tok"),
        mlp="swiglu", norm="rmsnorm", positions="rope",
        max_seq=_seq(cfg, "max_position_embeddings"),
        tied=_bool(cfg, "tie_word_embeddings", False),
        out_bias=False, mlp_bias=False,
        norm_eps=_float(cfg, "rms_norm_eps",
                        1e-5 if kind == "mixtral" else 1e-6),
        rope_theta=_float(cfg, "rope_theta",
                          1e6 if kind == "mixtral" else 1e4),
        name=name)
    return {"mixtral": _mixtral, "qwen2_moe": _qwen_moe,
            "qwen3_moe": _qwen_moe, "deepseek_v3": _deepseek_v3}[kind](
        cfg, kind, common)


def _gqa(cfg, kind, c) -> dict:
    heads = c["heads"]
    kv = _int(cfg, "num_key_value_heads", 8 if kind == "mixtral" else heads)
    if heads % kv:
        raise ValueError(f"config.json: 'num_key_value_heads' ({kv}) does "
                         f"not divide 'num_attention_heads' ({heads})")
    head_dim = _heads(cfg, c["hidden"], heads,
                      None)   # Qwen3MoeConfig: hidden / heads
    return dict(kv_heads=kv, head_dim=head_dim)


def _mixtral(cfg, kind, c) -> Arch:
    return Arch(**c, **_gqa(cfg, kind, c),
                experts=_int(cfg, "num_local_experts"),
                expert_ffn=c["ffn"], qkv_bias=False, norm_topk=True)


def _qwen_moe(cfg, kind, c) -> Arch:
    shared = {}
    if kind == "qwen2_moe":
        bias = _bool(cfg, "qkv_bias", True)
        sf = _int(cfg, "shared_expert_intermediate_size")
        shared = dict(shared_experts=1, shared_ffn=sf, shared_gate=True)
    else:
        bias = _bool(cfg, "attention_bias", False)
        if bias:
            c = dict(c, out_bias=True)
    return Arch(**c, **_gqa(cfg, kind, c), **shared,
                # transformers 5 writes Qwen's num_experts under the
                # attribute_map's num_local_experts (config.to_dict())
                experts=_int(cfg, "num_experts" if "num_experts" in cfg
                             else "num_local_experts"),
                expert_ffn=_int(cfg, "moe_intermediate_size"),
                qkv_bias=bias, qk_norm=kind == "qwen3_moe",
                norm_topk=_bool(cfg, "norm_topk_prob", False))


def _deepseek_v3(cfg, kind, c) -> Arch:
    if _bool(cfg, "attention_bias", False):
        raise ValueError("config.json: 'attention_bias' true is not read "
                         "for deepseek_v3")
    nope = _int(cfg, "qk_nope_head_dim")
    rope = _int(cfg, "qk_rope_head_dim")
    groups = _int(cfg, "n_group", 0, low=0)
    func = cfg.get("scoring_func", "sigmoid")
    if func not in ("sigmoid", "softmax"):
        raise ValueError(f"config.json: 'scoring_func' {func!r} is not "
                         "sigmoid or softmax")
    n_shared = _int(cfg, "n_shared_experts", 0, low=0)
    return Arch(**c, kv_heads=c["heads"], head_dim=nope + rope,
                qkv_bias=False,
                experts=_int(cfg, "n_routed_experts"),
                expert_ffn=_int(cfg, "moe_intermediate_size"),
                shared_experts=n_shared,
                first_dense_layers=_int(cfg, "first_k_dense_replace", 0,
                                        low=0),
                router=func,
                norm_topk=_bool(cfg, "norm_topk_prob", True),
                routed_scaling=_float(cfg, "routed_scaling_factor", 1.0),
                expert_groups=groups if groups > 1 else 0,
                group_top_k=_int(cfg, "topk_group", 0, low=0)
                if groups > 1 else 0,
                q_lora_rank=_int(cfg, "q_lora_rank", 0, low=0),
                kv_lora_rank=_int(cfg, "kv_lora_rank"),
                qk_rope_head_dim=rope, qk_nope_head_dim=nope,
                v_head_dim=_int(cfg, "v_head_dim"))
