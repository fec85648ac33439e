"""What one rotary block keeps for backward (RMSNorm, a gated MLP, RoPE:
the Llama-style block and its variants, as :mod:`labkit.nn.decoder`
builds them), on CPU (pure Python; :mod:`labkit.predict.activations.arch`
explains the Llama-style block op by op and walks the whole model).

    from labkit.predict.model import arch
    from labkit.predict.activations.block import rope_block_saved
    rope_block_saved(arch.preset("llama-tiny"), 4, 32, "fp32", "none", "b")

The variants, each derived from the ops the block runs (and held to the
block's measured storages by ``tests/test_measure_activations_arch.py``):

- a norm whose input is a matmul's output (``post_norms``: Gemma 2's
  sandwich, OLMo 2's reordered norm; ``qk_norm``: the q/k norms per head,
  Qwen3, or over all heads, OLMo 2) keeps its input, ``rstd`` and
  ``x * rstd``; with
  16-bit activations it computes in fp32 and keeps an fp32 copy of its
  input instead (the same rule as the pre-norms under ``fsdp_bf16``);
- no pre-norms (OLMo 2): the projections read the residual itself, kept
  once (fp32, bf16 weights) or as a bf16 cast per Linear (autocast, where
  the fp32 residual is then not kept at all);
- ``parallel``: the MLP reads the attention's normed input: no second
  norm, no second input (bf16 casts per Linear under autocast still);
- ``mlp = "geglu"``: GELU's output where SwiGLU keeps SiLU's;
  ``mlp_fused``: one ``gate_up`` output (b s 2f), split by views;
  ``qkv_fused``: one bf16 cast of the input and one weight copy;
- partial rotary: cos/sin tables ``s x r`` (``r`` the rotated width),
  and the rotated queries come out of a ``cat`` in head-major layout (as
  out of a per-head q norm), so SDPA's output does too and the output
  projection's input is a copy;
- a sliding window under SDPA: its boolean mask turned into an additive
  ``s x s`` mask in the activations' dtype (kept by SDPA);
- soft-capped scores or sinks (the explicit softmax of
  :mod:`labkit.nn.decoder.attention`): a head-major copy of the queries
  (``bmm``'s input), the boolean mask (``s x s``), tanh's output of the
  scores (b heads s s, soft-cap), softmax's fp32 output (one column more
  per row with sinks), its cast to 16-bit (kept by ``p @ v``), and the
  output projection's input (a copy) -- no SDPA output or log-sum-exp.

``recompute = "selective"`` keeps the outputs of every matmul and of
SDPA (:data:`labkit.training.recompute.POLICY_OPS`): a fused projection
is one output; the explicit softmax's two ``bmm`` outputs (scores, and
``p @ v``) take SDPA's place.
"""
from __future__ import annotations

from labkit.predict.activations.ledger import Saved, _dtypes


def _norm(where, name, x_name, shape, precision, low=False):
    """What an RMSNorm keeps, its input included. It computes in fp32 on
    a 16-bit input (bf16 weights, or ``low``: a matmul's bf16 output under
    autocast): then an fp32 copy of the input instead of the input."""
    res, _, stat = _dtypes(precision, "cpu")
    rows = shape[:-1] + (1,)
    if precision == "fsdp_bf16" or (low and precision != "fp32"):
        return [Saved(where, f"{name} input (fp32 copy)", shape, "fp32"),
                Saved(where, f"{name}.rstd", rows, "fp32"),
                Saved(where, f"{name}.x*rstd", shape, "fp32")]
    return [Saved(where, x_name, shape, res),
            Saved(where, f"{name}.rstd", rows, stat),
            Saved(where, f"{name}.x*rstd", shape, res)]


def _casts(where, names_shapes):
    """Autocast's bf16 weight copies (a bias's copy is not kept)."""
    return [Saved(where, f"{n}.weight (bf16 copy)", s, "bf16", "weight_cast")
            for n, s in names_shapes]


def eager(a) -> bool:
    """Whether the block computes its softmax itself (soft-cap, sinks)."""
    return bool(a.attn_softcap or a.sinks)


def rope_block_saved(a, batch, seq, precision, recompute, where,
                     local=False) -> list:
    """One block of the record ``a`` (``local``: a sliding-window layer)."""
    b, s, h, f = batch, seq, a.hidden, a.ffn
    hq, d, qd, kvd = a.heads, a.head_dim, a.q_dim, a.kv_dim
    res, lin, _ = _dtypes(precision, "cpu")
    cast = precision == "autocast_bf16"
    qkv_users = ("qkv",) if a.qkv_fused else ("q", "k", "v")
    mlp_users = ("gate_up",) if a.mlp_fused else ("gate", "up")

    def S(name, shape, dtype):
        return Saved(where, name, shape, dtype)
    inp = S("input", (b, s, h), res)
    if recompute == "full":
        return [inp]
    if recompute == "selective":   # the matmuls' and the attention's outputs
        out = [inp]
        out += ([S("qkv.out", (b, s, qd + 2 * kvd), lin)] if a.qkv_fused
                else [S("q.out", (b, s, qd), lin),
                      S("k.out", (b, s, kvd), lin),
                      S("v.out", (b, s, kvd), lin)])
        if eager(a):
            out += [S("q@k^T (scores)", (b * hq, s, s), lin),
                    S("p@v", (b * hq, s, d), lin)]
        else:
            out += [S("sdpa.out", (b, hq, s, d), lin),
                    S("sdpa.lse", (b, hq, s), "fp32")]
        out.append(S("o.out", (b, s, h), lin))
        out += ([S("gate_up.out", (b, s, 2 * f), lin)] if a.mlp_fused
                else [S("gate.out", (b, s, f), lin),
                      S("up.out", (b, s, f), lin)])
        return out + [S("down.out", (b, s, h), lin)]

    def norm(n, x_name, shape=(b, s, h), low=False):
        return _norm(where, n, x_name, shape, precision, low)

    def inputs(n, users):   # a Linear's input: cast once per Linear
        if cast:
            return [S(f"{u} input (bf16 cast of {n})", (b, s, h), "bf16")
                    for u in users]
        return [S(f"{'/'.join(users)} input ({n})", (b, s, h), lin)]
    out = []
    if a.pre_norms:
        out += norm("ln1", "input (ln1 input)") + inputs("ln1 output",
                                                         qkv_users)
    else:                         # the residual itself feeds Q, K, V
        out += inputs("block input", qkv_users)
    if cast:
        out += _casts(where, [("qkv", (qd + 2 * kvd, h))] if a.qkv_fused
                      else [("q", (qd, h)), ("k", (kvd, h)),
                            ("v", (kvd, h))])
        out += _casts(where, [("o", (h, qd))])
    if a.qk_norm_full:            # over all heads, on the projections
        out += norm("q_norm", "q.out (q_norm input)", (b, s, qd), True)
        out += norm("k_norm", "k.out (k_norm input)", (b, s, kvd), True)
    elif a.qk_norm:               # per head (Qwen3, Gemma 3)
        out += norm("q_norm", "q.out (q_norm input)", (b, hq, s, d), True)
        out += norm("k_norm", "k.out (k_norm input)",
                    (b, a.kv_heads, s, d), True)
    out += attention_saved(a, b, s, lin, where, local)
    if a.post_norms:
        out += norm("post_attn", "o.out (post_attn input)", low=True)
    if a.parallel:                # the MLP reads ln1's output too
        out += inputs("ln1 output", mlp_users) if cast else []
    elif a.pre_norms:
        out += norm("ln2", "ln2 input (residual)") + inputs("ln2 output",
                                                            mlp_users)
    else:
        out += inputs("residual", mlp_users)
    if cast:
        out += _casts(where, [("gate_up", (2 * f, h))] if a.mlp_fused
                      else [("gate", (f, h)), ("up", (f, h))])
        out += _casts(where, [("down", (h, f))])
    act = "silu" if a.mlp == "swiglu" else "gelu"
    out += ([S("gate_up.out", (b, s, 2 * f), lin)] if a.mlp_fused
            else [S(f"gate.out ({act} input)", (b, s, f), lin),
                  S("up.out", (b, s, f), lin)])
    out += [S(f"{act}.out", (b, s, f), lin),
            S(f"{act}*up (down input)", (b, s, f), lin)]
    if a.post_norms:
        out += norm("post_mlp", "down.out (post_mlp input)", low=True)
    return out


def attention_saved(a, b, s, lin, where, local) -> list:
    """From the rotary tables to the output projection's input."""
    hq, d = a.heads, a.head_dim
    r = int(a.rotary_fraction * d)
    # repeat_kv copies K and V to all query heads -- except for one KV
    # head (MQA), where the expand-and-reshape is a view (stride 0) that
    # SDPA reads as it is and a bmm copies
    rep = hq if a.kv_heads > 1 or eager(a) else 1

    def S(name, shape, dtype):
        return Saved(where, name, shape, dtype)
    out = [S("rope.cos", (s, r), lin), S("rope.sin", (s, r), lin)]
    partial = r < d
    # a cat (partial rotary) or a per-head norm gives head-major queries:
    # SDPA's output is then head-major too, and o's input a copy
    head_major = partial or (a.qk_norm and not a.qk_norm_full)
    q = "q (rotated, head-major copy)" if partial else "q (rotated)"
    if not eager(a):
        out.append(S(q, (b, hq, s, d), lin))
    out += [S("k (rotated, repeated to all heads)", (b, rep, s, d), lin),
            S("v (repeated to all heads)", (b, rep, s, d), lin)]
    if eager(a):
        cols = s + 1 if a.sinks else s
        out += [S("q (head-major copy: bmm input)", (b, hq, s, d), lin),
                S("mask (causal, window)", (s, s), "bool")]
        if a.attn_softcap:
            out.append(S("tanh(scores / cap)", (b, hq, s, s), lin))
        out.append(S("softmax.out", (b, hq, s, cols), "fp32"))
        if lin != "fp32":
            out.append(S("softmax.out (16-bit copy)", (b, hq, s, cols), lin))
        return out + [S("p@v (o input, a copy)", (b, s, hq * d), lin)]
    if local:
        out.append(S("window mask (additive)", (s, s), lin))
    out += [S("sdpa.out", (b, hq, s, d), lin),
            S("sdpa.lse", (b, hq, s), "fp32")]
    if head_major:
        out.append(S("o input (a copy of sdpa.out)", (b, s, hq * d), lin))
    return out
