"""Tensor parallelism of a grouped-query attention layer: how the KV heads
split over the TP ranks, and what is replicated when they cannot (pure
Python, read from an architecture record).

    from labkit.predict.model import arch
    from labkit.predict.tensor_parallel.gqa import layer_params
    layer_params(arch.preset("llama3.1-405b"), tp=16)

Megatron-LM splits attention by heads (Shoeybi et al. 2019, Sec. 3): each
of ``t`` ranks owns ``heads / t`` query heads and, under GQA (Ainslie et
al. 2023), ``kv_heads / t`` K/V heads. With ``t > kv_heads`` there are
not enough K/V heads to go round: each K/V head is replicated on
``t / kv_heads`` ranks (Megatron-LM and vLLM do this), so a rank holds one
whole K/V head, ``2 h d`` weights instead of ``2 h kv_heads d / t``, and
the K/V gradients of the copies must be all-reduced among them. The MLP
(SwiGLU's gate and up column-parallel, down row-parallel) splits as the
GPT's. The record's biases follow the weights they belong to;
row-parallel biases and the norms are replicated.
"""
from __future__ import annotations


def kv_split(a, tp: int) -> dict:
    """K/V heads per rank and the replication factor for ``tp`` ranks."""
    if not isinstance(tp, int) or tp < 1:
        raise ValueError(f"tp must be a positive integer, got {tp!r}")
    if a.heads % tp:
        raise ValueError(f"tp={tp} does not divide the {a.heads} "
                         "attention heads")
    if a.kv_heads >= tp:
        if a.kv_heads % tp:
            raise ValueError(f"tp={tp} does not divide the {a.kv_heads} "
                             "KV heads")
        return {"kv_heads_per_rank": a.kv_heads // tp, "replicas": 1}
    if tp % a.kv_heads:
        raise ValueError(f"the {a.kv_heads} KV heads do not divide "
                         f"tp={tp}: K/V cannot be replicated evenly")
    return {"kv_heads_per_rank": 1, "replicas": tp // a.kv_heads}


def layer_params(a, tp: int = 1) -> dict:
    """Parameters of one dense layer on one TP rank: ``sharded``,
    ``replicated``, ``total``, and ``kv_replicated_bytes16``: the 16-bit
    bytes of K/V weights a rank holds beyond its ``1/t`` share."""
    split = kv_split(a, tp)
    ffn = a.ffn
    if ffn % tp or a.hidden % tp:
        raise ValueError(f"FFN width {ffn} and hidden {a.hidden} must "
                         f"divide by tp={tp}")
    h, d = a.hidden, a.head_dim
    q = h * (a.heads // tp) * d + (a.heads // tp) * d * a.qkv_bias
    kv_w = split["kv_heads_per_rank"] * d
    kv = 2 * (h * kv_w + kv_w * a.qkv_bias)
    o = (a.heads // tp) * d * h
    mats = 3 if a.gated else 2
    mlp = mats * h * ffn // tp + (mats - 1) * ffn // tp * a.mlp_bias
    per = 2 if a.norm == "layernorm" else 1    # weight (and bias)
    norm = h * per
    qk = per * a.qk_norm * (0 if a.qk_norm_full else 2 * d)
    replicated = (a.block_norms * norm + h * a.out_bias + h * a.mlp_bias
                  + qk)
    # q/k norms over all heads (OLMo 2) and sinks split with the heads
    sharded = q + kv + o + mlp + (
        per * (a.heads // tp * d + split["kv_heads_per_rank"] * d)
        * a.qk_norm_full) + a.heads // tp * a.sinks
    fair = 2 * (h * a.kv_dim + a.kv_dim * a.qkv_bias) / tp
    return {"sharded": sharded, "replicated": replicated,
            "total": sharded + replicated, **split,
            "kv_replicated_bytes16": int(2 * (kv - fair))}
