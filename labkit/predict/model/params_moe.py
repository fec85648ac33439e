"""Parameters of a mixture-of-experts layer and of multi-head latent
attention, tensor by tensor (pure Python; :mod:`labkit.predict.model.params`
hands such layers here).

    python -m labkit params --hf-config mixtral-8x7b.json --json

Names are Hugging Face's with each expert spelled out
(``layers.1.mlp.experts.3.gate_proj.weight``; transformers 5 fuses them
into ``experts.gate_up_proj [E, 2f, h]`` and ``experts.down_proj
[E, h, f]``, the same numbers). Per MoE layer with ``E`` experts of width
``f``: the router ``h E``, the experts ``3 E h f``, the shared MLP
``3 h f_s`` (+ ``h`` for Qwen2-MoE's shared gate). A token uses ``k`` of
the ``E`` experts, so the active count drops ``(E - k) 3 h f`` per MoE
layer (Fedus et al. 2022, Sec. 2: parameters grow with E, FLOPs with k).

MLA (DeepSeek-V2, Sec. 2.1, Eq. 9-14 and 37-47) with ``n`` heads, ``r_q``
and ``r_kv`` the ranks, ``d_n``, ``d_r``, ``d_v`` the head widths:
``h r_q + r_q + r_q n (d_n + d_r)`` (queries), ``h (r_kv + d_r) + r_kv +
r_kv n (d_n + d_v)`` (the joint latent, its norm, its up-projection) and
``n d_v h`` (output).
"""
from __future__ import annotations


def _p():
    from labkit.predict.model import tensors   # the dense pieces
    return tensors


def attention(a, p: str) -> list:
    P = _p()
    h, n = a.hidden, a.heads
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    s = f"{p}.self_attn"
    t = []
    if a.q_lora_rank:
        r = a.q_lora_rank
        t += P._linear(f"{s}.q_a_proj", h, r, False, "attention")
        t += [(f"{s}.q_a_layernorm.weight", (r,), "attention")]
        t += P._linear(f"{s}.q_b_proj", r, n * qk, False, "attention")
    else:
        t += P._linear(f"{s}.q_proj", h, n * qk, False, "attention")
    r = a.kv_lora_rank
    t += P._linear(f"{s}.kv_a_proj_with_mqa", h, r + a.qk_rope_head_dim,
                   False, "attention")
    t += [(f"{s}.kv_a_layernorm.weight", (r,), "attention")]
    t += P._linear(f"{s}.kv_b_proj", r,
                   n * (a.qk_nope_head_dim + a.v_head_dim), False,
                   "attention")
    t += P._linear(f"{s}.o_proj", n * a.v_head_dim, h, False, "attention")
    return t


def moe_mlp(a, p: str) -> list:
    """The routed layer: router, experts, shared MLP (and its gate)."""
    P, h = _p(), a.hidden
    t = P._linear(f"{p}.mlp.gate", h, a.experts, False, "mlp")
    for e in range(a.experts):
        t += P.expert(f"{p}.mlp.experts.{e}", a)
    if a.shared_experts:
        name = "shared_expert" if a.shared_gate else "shared_experts"
        t += P._mlp(f"{p}.mlp.{name}", h, a.shared_ffn, a)
    if a.shared_gate:
        t += P._linear(f"{p}.mlp.shared_expert_gate", h, 1, False, "mlp")
    return t


def layer_tensors(a, i: int) -> list:
    """Layer ``i`` of a record with experts or MLA (params' order)."""
    P, h, p = _p(), a.hidden, f"layers.{i}"
    if not a.kv_lora_rank:
        dense = a.with_(experts=0, top_k=0, shared_experts=0,
                        shared_ffn=0, shared_gate=False, expert_groups=0,
                        group_top_k=0)
        t = [x for x in P.layer(dense, i) if ".mlp." not in x[0]]
    else:
        t = P._norm(f"{p}.input_layernorm", h, a) + attention(a, p)
        t += P._norm(f"{p}.post_attention_layernorm", h, a)
    if a.experts and i >= a.first_dense_layers:
        return t + moe_mlp(a, p)
    return t + P._mlp(f"{p}.mlp", h, a.ffn, a)


def moe_counts(a) -> dict:
    """Per-token numbers the ledgers read: one expert, the routed and
    shared parts of one MoE layer, and the idle experts of the model."""
    P = _p()
    one = P._sum(P.expert("e", a))
    return dict(expert=one, routed_layer=a.experts * one,
                active_routed_layer=a.top_k * one,
                idle=a.moe_layers * (a.experts - a.top_k) * one)
