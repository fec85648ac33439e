"""What one rotary block keeps for backward (RoPE with RMSNorm or
LayerNorm, a gated or a GELU MLP: the Llama-style block, Phi-1/2's and
their variants, as :mod:`labkit.nn.decoder` builds them), on CPU (pure
Python; :mod:`labkit.predict.activations.arch` explains the Llama-style
block op by op and walks the whole model).

    from labkit.predict.model import arch
    from labkit.predict.activations.block import rope_block_saved
    rope_block_saved(arch.preset("llama-tiny"), 4, 32, "fp32", "none", "b")

The variants, each derived from the ops the block runs (and held to the
block's measured storages by ``tests/test_measure_activations_arch.py``):

- LayerNorm (Phi-1/2, GPT-NeoX) instead of RMSNorm: ``native_layer_norm``
  keeps its input, the per-row mean and ``rstd``, as in the GPT's block
  (:func:`_norm`; fp32 statistics under autocast, which runs a bf16
  input against fp32 weights), also as q/k or post-norms; a GELU MLP
  (Phi-1/2) keeps ``fc``'s output and GELU's, as the GPT's
  (:func:`mlp_saved`);
- an RMSNorm whose input is a matmul's output (``post_norms``: Gemma 2's
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
  ``qkv_fused``: one bf16 cast of the input and one weight copy; q, k
  and v are views of its one output, kept whole when SDPA reads V as a
  view (one query head per KV head, Phi-3-mini; one KV head) or when the
  q/k norms keep their input (LayerNorm; RMSNorm in fp32);
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

An MoE block (:mod:`labkit.predict.activations.moe`) is this block with
the MoE layer's entries in the MLP's place (``mlp``), and its experts are
:func:`mlp_saved` on their rows.
"""
from __future__ import annotations

from labkit.predict.activations.ledger import Saved, _dtypes


def _norm(where, name, x_name, shape, precision, low=False,
          norm="rmsnorm"):
    """What a norm keeps, its input included.

    RMSNorm (decomposed on CPU: ``x * rsqrt(mean(x^2) + eps) * w``, Zhang
    & Sennrich 2019): its input, ``rstd`` and ``x * rstd``; on a 16-bit
    input (bf16 weights, or ``low``: a matmul's bf16 output under
    autocast) it computes in fp32 and keeps an fp32 copy of the input
    instead. LayerNorm (``native_layer_norm``, Ba et al. 2016): its
    input as it is, the per-row mean and ``rstd`` -- in the input's dtype
    on CPU, fp32 under autocast (which leaves it to run a bf16 input
    against fp32 weights: mixed types, fp32 statistics)."""
    res, lin, stat = _dtypes(precision, "cpu")
    rows = shape[:-1] + (1,)
    if norm == "layernorm":
        return [Saved(where, x_name, shape, lin if low else res),
                Saved(where, f"{name}.mean", rows, stat),
                Saved(where, f"{name}.rstd", rows, stat)]
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


def v_view(a) -> bool:
    """Whether SDPA reads V as a view of its projection's output: one
    query head per KV head (``repeat_kv`` returns it as it is) or one KV
    head (a stride-0 expand); otherwise the repeat is a copy."""
    return not eager(a) and (a.gqa_group == 1 or a.kv_heads == 1)


def mlp_users(a) -> tuple:
    """The Linears that read the MLP's input (autocast casts it once for
    each of them)."""
    if not a.gated:
        return ("fc",)
    return ("gate_up",) if a.mlp_fused else ("gate", "up")


def mlp_saved(a, S, rows, f, lin, cast, p=""):
    """What an MLP ``f`` wide keeps past its input, for ``rows`` (a shape
    prefix: ``(b, s)`` for the dense block, ``(n,)`` for an expert's
    rows): under autocast its weights' bf16 copies; GELU (Radford et al.
    2019): ``fc``'s output (GELU's input) and GELU's output (``proj``'s
    input); gated (SwiGLU, GeGLU: Shazeer 2020, Eq. 6): the gate's and
    the up projection's outputs (one ``gate_up`` output, split by views,
    when fused), the activation's output and the product (``down``'s
    input). ``S(name, shape, dtype, kind)`` makes an entry; ``p``
    prefixes the names."""
    h, out = a.hidden, []
    if not a.gated:
        ws = [("fc", (f, h)), ("proj", (h, f))]
    else:
        ws = ([("gate_up", (2 * f, h))] if a.mlp_fused
              else [("gate", (f, h)), ("up", (f, h))]) + [("down", (h, f))]
    if cast:
        out += [S(f"{p}{n}.weight (bf16 copy)", w, "bf16", "weight_cast")
                for n, w in ws]
    if not a.gated:
        return out + [S(f"{p}fc.out (gelu input)", rows + (f,), lin),
                      S(f"{p}gelu.out (proj input)", rows + (f,), lin)]
    act = "silu" if a.mlp == "swiglu" else "gelu"
    out += ([S(f"{p}gate_up.out", rows + (2 * f,), lin)] if a.mlp_fused
            else [S(f"{p}gate.out ({act} input)", rows + (f,), lin),
                  S(f"{p}up.out", rows + (f,), lin)])
    return out + [S(f"{p}{act}.out", rows + (f,), lin),
                  S(f"{p}{act}*up (down input)", rows + (f,), lin)]


def _mlp_outputs(a, rows, f) -> list:
    """The MLP's matmul outputs (what the selective policy keeps of it):
    ``(name, shape)`` pairs."""
    if not a.gated:
        return [("fc.out", rows + (f,)), ("proj.out", rows + (a.hidden,))]
    return ([("gate_up.out", rows + (2 * f,))] if a.mlp_fused
            else [("gate.out", rows + (f,)), ("up.out", rows + (f,))]) + [
        ("down.out", rows + (a.hidden,))]


def rope_block_saved(a, batch, seq, precision, recompute, where,
                     local=False, mlp=None) -> list:
    """One block of the record ``a`` (``local``: a sliding-window layer;
    ``mlp``: the entries of what stands in the MLP's place, its input
    included -- an MoE layer's -- instead of the dense MLP's)."""
    b, s, h, f = batch, seq, a.hidden, a.ffn
    hq, d, qd, kvd = a.heads, a.head_dim, a.q_dim, a.kv_dim
    res, lin, _ = _dtypes(precision, "cpu")
    cast = precision == "autocast_bf16"
    qkv_users = ("qkv",) if a.qkv_fused else ("q", "k", "v")

    def S(name, shape, dtype, kind="activation"):
        return Saved(where, name, shape, dtype, kind)
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
        return out + [S(n, shape, lin) for n, shape in
                      _mlp_outputs(a, (b, s), f)]

    def norm(n, x_name, shape=(b, s, h), low=False):
        return _norm(where, n, x_name, shape, precision, low, a.norm)

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
    # fused: q, k, v are views of one output, kept whole when SDPA keeps
    # V as a view, or when the q/k norms keep their input (LayerNorm;
    # RMSNorm in fp32)
    views = a.qkv_fused and (precision == "fp32" or a.norm == "layernorm")
    if a.qkv_fused and (v_view(a) or (a.qk_norm and views)):
        out.append(S("qkv.out (q, k, v are its views)",
                     (b, s, qd + 2 * kvd), lin))
    skip = 1 if views else 0      # the norms' inputs: views of qkv.out
    if a.qk_norm_full:            # over all heads, on the projections
        out += norm("q_norm", "q.out (q_norm input)", (b, s, qd),
                    True)[skip:]
        out += norm("k_norm", "k.out (k_norm input)", (b, s, kvd),
                    True)[skip:]
    elif a.qk_norm:               # per head (Qwen3, Gemma 3)
        out += norm("q_norm", "q.out (q_norm input)", (b, hq, s, d),
                    True)[skip:]
        out += norm("k_norm", "k.out (k_norm input)",
                    (b, a.kv_heads, s, d), True)[skip:]
    out += attention_saved(a, b, s, lin, where, local)
    if a.post_norms:
        out += norm("post_attn", "o.out (post_attn input)", low=True)
    users = mlp_users(a)
    if a.parallel:                # the MLP reads ln1's output too
        mlp_in = inputs("ln1 output", users) if cast else []
    elif a.pre_norms:
        out += norm("ln2", "ln2 input (residual)")
        mlp_in = inputs("ln2 output", users)
    else:
        mlp_in = inputs("residual", users)
    if mlp is None:
        out += mlp_in + mlp_saved(a, S, (b, s), f, lin, cast)
    else:                         # an MoE layer, its input included
        out += list(mlp)
    if a.post_norms:
        out += norm("post_mlp", "mlp out (post_mlp input)", low=True)
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
    out.append(S("k (rotated, repeated to all heads)", (b, rep, s, d), lin))
    if not (a.qkv_fused and v_view(a)):   # else: qkv.out, kept whole
        out.append(S("v (repeated to all heads)", (b, rep, s, d), lin))
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
