"""The mixture-of-experts and MLA fields of the architecture record
(pure Python): what each means, and the checks that keep them honest.

    from labkit import arch
    a = arch.from_hf_config("tests/data/hf_configs_moe/mixtral-8x7b.json")
    a.experts, a.top_k, a.router, a.norm_topk    # 8 2 softmax True

A routed MLP layer has ``experts`` SwiGLU experts of width ``expert_ffn``;
each token goes to ``top_k`` of them, chosen by a linear router (``gate``,
``hidden x experts``, no bias):

- ``router = "softmax"`` (Mixtral, Qwen-MoE; Shazeer et al. 2017, Eq. 3-5)
  or ``"sigmoid"`` (DeepSeek-V3, Liu et al. 2024, Eq. 15): the score of
  each expert; the top ``top_k`` scores are the gate weights,
  renormalised to sum 1 when ``norm_topk`` (Mixtral always, DeepSeek-V3
  yes, Qwen as its config says), then multiplied by ``routed_scaling``
  (DeepSeek-V3: 2.5);
- ``expert_groups`` / ``group_top_k`` (DeepSeek-V3 ``n_group = 8``,
  ``topk_group = 4``): the experts fall into groups (one per node under
  EP64 on 8 nodes) and a token may use experts of at most ``group_top_k``
  groups -- node-limited routing, DeepSeek-V3 Sec. 2.1.2;
- ``shared_experts``: always-on experts, held as ONE MLP of width
  ``shared_ffn`` (default ``shared_experts x expert_ffn``, as
  transformers builds them); ``shared_gate`` (Qwen2-MoE): a sigmoid of a
  ``hidden -> 1`` linear scales the shared expert's output;
- ``first_dense_layers`` (DeepSeek-V3 ``first_k_dense_replace = 3``): the
  first layers keep a dense MLP of width ``ffn``.

Multi-head latent attention (DeepSeek-V2, Sec. 2.1; V3 Sec. 2.1.1),
``kv_lora_rank > 0``: queries from a rank-``q_lora_rank`` bottleneck
(``q_a_proj``, an RMSNorm, ``q_b_proj``; plain ``q_proj`` when 0), keys
and values from one shared latent of ``kv_lora_rank`` plus a single
decoupled RoPE key of ``qk_rope_head_dim`` (``kv_a_proj_with_mqa``), up-
projected per head to ``qk_nope_head_dim`` keys and ``v_head_dim`` values
(``kv_b_proj``); ``head_dim`` is the query/key width
``qk_nope_head_dim + qk_rope_head_dim``.
"""
from __future__ import annotations

ROUTERS = ("softmax", "sigmoid")
INTS = ("shared_ffn", "expert_groups", "group_top_k", "q_lora_rank",
        "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
        "v_head_dim")


def check(a) -> None:
    """Called by :class:`labkit.arch.Arch` after its own checks."""
    for k in INTS:
        v = getattr(a, k)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"{k} must be an integer >= 0, got {v!r}")
    if a.router not in ROUTERS:
        raise ValueError(f"router must be one of {', '.join(ROUTERS)}, "
                         f"got {a.router!r}")
    if not a.routed_scaling > 0:
        raise ValueError(f"routed_scaling must be > 0, got "
                         f"{a.routed_scaling!r}")
    if a.shared_experts and not a.shared_ffn:
        object.__setattr__(a, "shared_ffn", a.shared_experts * a.expert_ffn)
    if a.expert_groups:
        g, tg = a.expert_groups, a.group_top_k
        if a.experts % g or not 1 <= tg <= g:
            raise ValueError(
                f"expert_groups={g} must divide experts={a.experts} and "
                f"1 <= group_top_k <= expert_groups (got {tg})")
        if a.top_k > tg * (a.experts // g):
            raise ValueError(f"top_k={a.top_k} > the experts of "
                             f"{tg} groups ({tg * (a.experts // g)})")
    if a.kv_lora_rank:
        need = ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
        missing = [k for k in need if not getattr(a, k)]
        if missing:
            raise ValueError(f"MLA (kv_lora_rank={a.kv_lora_rank}) needs "
                             f"{', '.join(missing)} > 0")
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.head_dim != qk:
            raise ValueError(f"MLA: head_dim ({a.head_dim}) must be "
                             f"qk_nope_head_dim + qk_rope_head_dim ({qk})")


def mla(a) -> bool:
    return a.kv_lora_rank > 0
