"""The activation ledger of an architecture record: every tensor the model
keeps for backward, one ledger for the GPT (:class:`labkit.nn.model.GPT`) and
the Llama-style block (GQA, SwiGLU, RMSNorm, RoPE:
:class:`labkit.nn.decoder.Decoder`) (pure Python; the twin of
:func:`labkit.measure.activations.measure`).

    from labkit.predict.model import arch
    from labkit.predict.activations import arch as AA
    AA.saved(arch.preset("llama-tiny"), seq=32, batch=4)
    AA.saved(arch.preset("gpt-tiny"), seq=32, batch=4)

:func:`saved` walks the model once: positions, blocks, final norm, output
layer, loss. The GPT's block is
:func:`labkit.predict.activations.gpt_block_saved` (whose positional
:func:`labkit.predict.activations.saved` is this ledger on
:func:`labkit.predict.model.arch.gpt`); the Llama-style block is here, on CPU,
with the same precisions and recomputation modes. What autograd saves, op
by op, where it differs from the GPT's block:

- RMSNorm (``x * rsqrt(mean(x^2) + eps) * w``, decomposed on CPU): its
  input, the per-row ``rstd`` (b s x 1), and the normalised ``x * rstd``
  (the weight's gradient needs it) -- in the residual's dtype (autocast
  leaves these ops in fp32); with bf16 weights it computes in fp32 and
  keeps an fp32 copy of its input, fp32 ``rstd`` and ``x * rstd``;
- separate Q, K, V projections: under autocast each Linear casts its
  input, so the RMSNorm output is kept three times in bf16 (twice before
  the MLP's gate and up);
- RoPE: one cos and one sin table (s x head_dim) per layer, kept by the
  multiplications; the rotated queries (b x heads x s x d);
- GQA: K and V repeated to all query heads before SDPA (one copy each,
  ``repeat_kv``): SDPA keeps the copies, b x heads x s x d (with one KV
  head, MQA, the repeat is a stride-0 view: b x 1 x s x d) -- the K/V
  projections' own outputs are not kept (:func:`saved` with
  ``recompute="selective"`` keeps them, b s kv_heads d);
- SwiGLU: the gate's and the up projection's outputs, SiLU's output and
  the product (the down projection's input): four b s ffn tensors where
  GELU's MLP keeps two b s 4h.

Biases are covered (autocast casts them too); per-head Q/K norms are not.
"""
from __future__ import annotations

from labkit.predict.activations.ledger import (DEVICES, PRECISIONS, RECOMPUTE,
                                               Saved, _dtypes, gpt_block_saved,
                                               total)

__all__ = ["block_saved", "saved", "total"]


def _family(a) -> str:
    """``gpt`` (LayerNorm, GELU, learned positions: labkit.nn.model.GPT) or
    ``llama`` (RMSNorm, SwiGLU, RoPE: labkit.nn.decoder.Decoder)."""
    if a.experts or a.qk_norm or a.extras:
        raise ValueError("this ledger covers dense blocks without Q/K "
                         "norms (GPT or Llama-style)")
    if (a.mlp, a.norm, a.positions) == ("gelu", "layernorm", "learned"):
        return "gpt"
    if (a.mlp, a.norm, a.positions) == ("swiglu", "rmsnorm", "rope"):
        return "llama"
    raise ValueError("this ledger is the GPT block's (GELU, LayerNorm, "
                     "learned positions) or the Llama-style block's "
                     "(SwiGLU, RMSNorm, RoPE)")


def _check(a, precision, recompute, device):
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: {PRECISIONS}")
    if recompute not in RECOMPUTE:
        raise ValueError(f"unknown recompute {recompute!r}: {RECOMPUTE}")
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}: {DEVICES}")
    if _family(a) == "llama" and device != "cpu":
        raise ValueError("the Llama block's ledger is measured on CPU only")
    return _family(a)


def _casts(where, name, shape, bias):
    """Autocast's bf16 weight copy; the bias's copy is not kept (addmm's
    backward does not need it)."""
    return [Saved(where, f"{name}.weight (bf16 copy)", shape, "bf16",
                  "weight_cast")]


def _norm(where, name, x_name, shape, precision):
    """What an RMSNorm keeps, its input included. With bf16 weights
    (``fsdp_bf16``) ``rms_norm`` computes in fp32: it keeps an fp32 copy
    of its input instead of the input itself, and fp32 statistics."""
    res, _, stat = _dtypes(precision, "cpu")
    rows = shape[:-1] + (1,)
    if precision == "fsdp_bf16":
        return [Saved(where, f"{name} input (fp32 copy)", shape, "fp32"),
                Saved(where, f"{name}.rstd", rows, "fp32"),
                Saved(where, f"{name}.x*rstd", shape, "fp32")]
    return [Saved(where, x_name, shape, res),
            Saved(where, f"{name}.rstd", rows, stat),
            Saved(where, f"{name}.x*rstd", shape, res)]


def block_saved(a, batch: int, seq: int, precision: str = "fp32",
                recompute: str = "none", where: str = "block",
                device: str = "cpu") -> list:
    """What one block of the record ``a`` keeps, its input included (the
    GPT's block: :func:`labkit.predict.activations.gpt_block_saved`)."""
    if _check(a, precision, recompute, device) == "gpt":
        return gpt_block_saved(a, batch, seq, precision, recompute, device,
                               where)
    b, s, h, f = batch, seq, a.hidden, a.ffn
    hq, d, qd, kvd = a.heads, a.head_dim, a.q_dim, a.kv_dim
    res, lin, stat = _dtypes(precision, "cpu")
    cast = precision == "autocast_bf16"

    def S(name, shape, dtype):
        return Saved(where, name, shape, dtype)
    inp = S("input (ln1 input)", (b, s, h), res)
    if recompute == "full":
        return [inp]
    if recompute == "selective":   # the matmuls' and SDPA's outputs
        return [inp, S("q.out", (b, s, qd), lin),
                S("k.out", (b, s, kvd), lin), S("v.out", (b, s, kvd), lin),
                S("sdpa.out", (b, hq, s, d), lin),
                S("sdpa.lse", (b, hq, s), "fp32"),
                S("o.out", (b, s, h), lin), S("gate.out", (b, s, f), lin),
                S("up.out", (b, s, f), lin), S("down.out", (b, s, h), lin)]

    def norm(n, x_name):
        return _norm(where, n, x_name, (b, s, h), precision)

    def inputs(n, users):   # a Linear's input: cast once per Linear
        if cast:
            return [S(f"{u} input (bf16 cast of {n} output)", (b, s, h),
                      "bf16") for u in users]
        return [S(f"{'/'.join(users)} input ({n} output)", (b, s, h), lin)]
    # repeat_kv copies K and V to all query heads -- except for one KV
    # head (MQA), where the expand-and-reshape is a view (stride 0)
    rep = hq if a.kv_heads > 1 else 1
    out = [*norm("ln1", inp.name), *inputs("ln1", ("q", "k", "v"))]
    if cast:
        out += (_casts(where, "q", (qd, h), a.qkv_bias)
                + _casts(where, "k", (kvd, h), a.qkv_bias)
                + _casts(where, "v", (kvd, h), a.qkv_bias)
                + _casts(where, "o", (h, qd), a.out_bias))
    out += [S("rope.cos", (s, d), lin), S("rope.sin", (s, d), lin),
            S("q (rotated)", (b, hq, s, d), lin),
            S("k (rotated, repeated to all heads)", (b, rep, s, d), lin),
            S("v (repeated to all heads)", (b, rep, s, d), lin),
            S("sdpa.out (o input)", (b, hq, s, d), lin),
            S("sdpa.lse", (b, hq, s), "fp32"),
            *norm("ln2", "ln2 input (residual)"),
            *inputs("ln2", ("gate", "up"))]
    if cast:
        out += (_casts(where, "gate", (f, h), a.mlp_bias)
                + _casts(where, "up", (f, h), a.mlp_bias)
                + _casts(where, "down", (h, f), a.mlp_bias))
    out += [S("gate.out (silu input)", (b, s, f), lin),
            S("up.out", (b, s, f), lin), S("silu.out", (b, s, f), lin),
            S("silu*up (down input)", (b, s, f), lin)]
    return out


def saved(a, seq: int, batch: int, precision: str = "fp32",
          recompute: str = "none", strided_targets: bool = True,
          device: str = "cpu") -> list:
    """Every tensor one forward of the whole model keeps for backward:
    the learned positions' indices (GPT), the blocks, the final norm, the
    output layer and the loss (``labkit.nn.model.batch``'s targets are a
    strided view: a copy)."""
    family = _check(a, precision, recompute, device)
    for k, v in (("seq", seq), ("batch", batch)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{k} must be a positive integer, got {v!r}")
    b, s, h, V = batch, seq, a.hidden, a.vocab
    res, lin, stat = _dtypes(precision, device)
    out = []
    if a.positions == "learned":
        out.append(Saved("embed", "pos indices (arange)", (s,), "int64"))
    for i in range(a.layers):
        out += block_saved(a, b, s, precision, recompute, f"block {i}",
                           device)
    if family == "gpt":
        out += [Saved("head", "ln_f input (last block output)", (b, s, h),
                      res),
                Saved("head", "ln_f.mean", (b, s, 1), stat),
                Saved("head", "ln_f.rstd", (b, s, 1), stat)]
    else:
        out += _norm("head", "ln_f", "ln_f input (last block output)",
                     (b, s, h), precision)
    out += [Saved("head", "out input (ln_f output)", (b, s, h), lin)]
    if precision == "autocast_bf16":
        out.append(Saved("head", "out.weight (bf16 copy)", (V, h), "bf16",
                         "weight_cast"))
    out += [Saved("loss", "log_softmax out (fp32 logits)", (b * s, V),
                  "fp32"),
            *([Saved("loss", "targets (flattened copy)", (b * s,),
                     "int64")] if strided_targets else []),
            Saved("loss", "nll total weight", (), "fp32")]
    return out


def activation_bytes(a, seq: int, batch: int, **kw) -> int:
    """Bytes of :func:`saved` that grow with the batch (no weight copies)."""
    return total(saved(a, seq, batch, **kw), "activation")
