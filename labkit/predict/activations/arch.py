"""The activation ledger of an architecture record: every tensor the model
keeps for backward, one ledger for the GPT (:class:`labkit.nn.model.GPT`),
the Llama-style block (GQA, SwiGLU, RMSNorm, RoPE:
:class:`labkit.nn.decoder.Decoder`) and its variants (pure Python; the
twin of :func:`labkit.measure.activations.measure`).

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

Biases are covered (autocast casts them too). The variants of today's
decoders (post and sandwich norms, no pre-norms, parallel attention + MLP,
GeGLU, fused projections, q/k norms over all heads, partial rotary, a
sliding window, soft-caps, sinks, the output layer's bias) and the
rotary blocks with LayerNorm or a GELU MLP (Phi-1/2: parallel attention
+ MLP, partial rotary, LayerNorm, GELU, the output layer's bias; its
q/k LayerNorms) are derived in :mod:`labkit.predict.activations.block`;
cross-attention layers are skipped, as a text-only step skips them.
What neither family is (learned positions beside RMSNorm or a gated
MLP) is refused in one line naming it.
"""
from __future__ import annotations

from labkit.predict.activations.block import _norm, rope_block_saved
from labkit.predict.activations.ledger import (DEVICES, PRECISIONS, RECOMPUTE,
                                               Saved, _dtypes, gpt_block_saved,
                                               total)

__all__ = ["block_saved", "saved", "total"]


def _family(a) -> str:
    """``gpt`` (LayerNorm, GELU, learned positions: labkit.nn.model.GPT) or
    ``rope`` (RoPE with RMSNorm or LayerNorm, a gated or a GELU MLP: the
    Llama-style block, Phi-1/2's and the variants
    :mod:`labkit.predict.activations.block` derives); anything else is
    refused in one line naming what is not covered."""
    if a.experts:
        raise ValueError("this ledger covers dense blocks "
                         "(labkit.predict.activations.moe: experts)")
    if a.kv_lora_rank:   # its block is not labkit.nn.decoder's attention
        raise ValueError("not covered by the activation ledger: MLA "
                         "(labkit.predict.model.mla sizes one MLA block)")
    if (a.mlp, a.norm, a.positions) == ("gelu", "layernorm", "learned"):
        if a.qk_norm or variants(a):
            raise ValueError("this ledger covers the GPT block without Q/K "
                             "norms or variants, not "
                             f"{', '.join(variants(a)) or 'Q/K norms'}")
        return "gpt"
    if a.positions != "rope":
        raise ValueError("this ledger is the GPT block's (GELU, LayerNorm, "
                         "learned positions) or a rotary block's, not "
                         f"{a.mlp}, {a.norm}, {a.positions}")
    return "rope"


def variants(a) -> tuple:
    """The block variants ``a`` has (beyond GPT-2's and Llama's)."""
    return a.extras + tuple(k for k in (
        "window", "attn_softcap", "logit_softcap", "mlp_fused",
        "embed_extra") if getattr(a, k)) + (
        ("partial rotary",) if a.rotary_fraction < 1 else ())


def _check(a, precision, recompute, device):
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: {PRECISIONS}")
    if recompute not in RECOMPUTE:
        raise ValueError(f"unknown recompute {recompute!r}: {RECOMPUTE}")
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}: {DEVICES}")
    if _family(a) == "rope" and device != "cpu":
        raise ValueError("the Llama block's ledger is measured on CPU only")
    return _family(a)


def block_saved(a, batch: int, seq: int, precision: str = "fp32",
                recompute: str = "none", where: str = "block",
                device: str = "cpu", local: bool = False,
                mlp: list | None = None) -> list:
    """What one block of the record ``a`` keeps, its input included (the
    GPT's block: :func:`labkit.predict.activations.gpt_block_saved`);
    ``mlp``: an MoE layer's entries in the dense MLP's place
    (:mod:`labkit.predict.activations.moe`)."""
    if _check(a, precision, recompute, device) == "gpt":
        return gpt_block_saved(a, batch, seq, precision, recompute, device,
                               where)
    return rope_block_saved(a, batch, seq, precision, recompute, where,
                            local, mlp)


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
        if i in a.cross_layers:   # skipped by a text-only step (Mllama)
            continue
        out += block_saved(a, b, s, precision, recompute, f"block {i}",
                           device, i in a.window_layers)
    if family == "gpt":
        out += [Saved("head", "ln_f input (last block output)", (b, s, h),
                      res),
                Saved("head", "ln_f.mean", (b, s, 1), stat),
                Saved("head", "ln_f.rstd", (b, s, 1), stat)]
    else:
        out += _norm("head", "ln_f", "ln_f input (last block output)",
                     (b, s, h), precision, norm=a.norm)
    out += [Saved("head", "out input (ln_f output)", (b, s, h), lin)]
    if precision == "autocast_bf16":
        out.append(Saved("head", "out.weight (bf16 copy)", (V, h), "bf16",
                         "weight_cast"))
    if a.logit_softcap:   # cap tanh(logits / cap): tanh keeps its output
        out.append(Saved("head", "tanh(logits / cap)", (b, s, V), lin))
    out += [Saved("loss", "log_softmax out (fp32 logits)", (b * s, V),
                  "fp32"),
            *([Saved("loss", "targets (flattened copy)", (b * s,),
                     "int64")] if strided_targets else []),
            Saved("loss", "nll total weight", (), "fp32")]
    return out


def activation_bytes(a, seq: int, batch: int, **kw) -> int:
    """Bytes of :func:`saved` that grow with the batch (no weight copies)."""
    return total(saved(a, seq, batch, **kw), "activation")
