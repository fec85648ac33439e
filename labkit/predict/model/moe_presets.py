"""Two published mixture-of-experts models as named presets: their
``config.json`` files (:data:`CONFIGS`) read into records
(``preset("deepseek-v3")``). Above the readers:
imports :mod:`labkit.predict.model.hf_config`, which never imports this.
"""
from __future__ import annotations

from labkit.predict.model.hf_config import read

# The published config.json files of two MoE models, as the chapter and
# the planner read them (tests hold these equal to
# tests/data/hf_configs_moe/*.json).
CONFIGS = {
    "mixtral-8x7b": {
        "model_type": "mixtral", "num_hidden_layers": 32,
        "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336,
        "vocab_size": 32000, "tie_word_embeddings": False,
        "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "hidden_act": "silu",
        "max_position_embeddings": 32768, "num_local_experts": 8,
        "num_experts_per_tok": 2},
    "deepseek-v3": {
        "model_type": "deepseek_v3", "num_hidden_layers": 61,
        "hidden_size": 7168, "intermediate_size": 18432,
        "moe_intermediate_size": 2048, "n_routed_experts": 256,
        "n_shared_experts": 1, "num_experts_per_tok": 8,
        "first_k_dense_replace": 3, "moe_layer_freq": 1,
        "num_attention_heads": 128, "num_key_value_heads": 128,
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
        "tie_word_embeddings": False, "n_group": 8, "topk_group": 4,
        "topk_method": "noaux_tc", "scoring_func": "sigmoid",
        "norm_topk_prob": True, "routed_scaling_factor": 2.5,
        "num_nextn_predict_layers": 1, "rms_norm_eps": 1e-06,
        "rope_theta": 10000, "hidden_act": "silu",
        "max_position_embeddings": 163840},
}


def preset(name: str):
    """The record of one of :data:`CONFIGS` (``preset("deepseek-v3")``)."""
    if name not in CONFIGS:
        raise ValueError(f"unknown MoE preset {name!r} (choose from "
                         f"{', '.join(CONFIGS)})")
    return read(CONFIGS[name]).with_(name=name)
