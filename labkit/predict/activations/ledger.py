"""The activation ledger: every tensor the course's GPT keeps for backward.

    python -m labkit.predict.activations      # a table for the default GPT

Pure Python. :func:`saved` lists, tensor by tensor, what one forward pass of
:class:`labkit.nn.model.GPT` leaves alive for its backward (its parameters
aside): shape, dtype, bytes, and which module keeps it. The measurement
twin, :func:`labkit.measure.activations.measure`, counts the storages the
forward creates that are still alive after it, and the two agree to the
byte (ratio 1.000) for

- ``precision``: ``fp32``; ``autocast_bf16`` (``torch.autocast`` with bf16:
  the residual stream and LayerNorms stay fp32, every Linear saves a bf16
  copy of its input and of its weight); ``fsdp_bf16`` (FSDP's
  ``MixedPrecisionPolicy(param_dtype=bf16)``: bf16 weights, everything in
  bf16, no weight copies -- the gathered weights are FSDP's, freed after
  forward under FULL_SHARD);
- ``recompute``: ``none``; ``full`` (``torch.utils.checkpoint`` per block:
  only the block's input is kept); ``selective`` (the course's
  save-matmuls policy, :data:`SELECTIVE_SAVE`: a checkpoint that keeps the
  outputs of every matmul and of SDPA and recomputes LayerNorm, GELU and
  the weight casts; torchtitan's op-level policy differs: it recomputes
  every second matmul as well).

What autograd saves, op by op (PyTorch 2.x, SDPA's flash kernel):
``native_layer_norm`` its input, mean and rstd (b s x 1 each; fp32 on a GPU,
the input's dtype on CPU); ``addmm``/``mm`` their input and weight;
``_scaled_dot_product_flash_attention`` q, k, v (views of the QKV output),
its output and the log-sum-exp (b a s, fp32); ``gelu`` its input; the
embedding its indices (the caller's batch, not counted: it exists without
the model); ``log_softmax`` its fp32 output; ``nll_loss`` the targets (a
copy: the course's targets are a strided view) and a scalar total weight.

Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", Table 2 counts the same layer in 16-bit as
``s b h (34 + 5 a s / h)``; :func:`korthikanti_terms` puts the paper's terms
beside ours: the same 32 s b h of linear inputs and LayerNorm inputs, no
dropout masks (2 s b h: this GPT has no dropout), no ``a s x s`` softmax
(5 a s^2 b: SDPA keeps the log-sum-exp, 4 a s b), and LayerNorm statistics
the paper leaves out (4 s b x element size).
"""
from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "int64": 8, "bool": 1}
PRECISIONS = ("fp32", "autocast_bf16", "fsdp_bf16")
RECOMPUTE = ("none", "full", "selective")
DEVICES = ("cpu", "cuda")
# the op outputs the selective policy keeps (labkit.training.recompute.POLICY_OPS)
SELECTIVE_SAVE = ("qkv.out", "sdpa.out", "sdpa.lse", "attn.proj.out",
                  "mlp.fc.out", "mlp.proj.out")


@dataclass(frozen=True)
class Saved:
    """One tensor kept for backward."""
    where: str      # "embed", "block 0", ..., "head", "loss"
    name: str
    shape: tuple
    dtype: str      # a key of DTYPE_BYTES
    kind: str = "activation"   # or "weight_cast": autocast's bf16 weights

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def bytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.dtype]


def _check(precision, recompute, device, **sizes):
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: {PRECISIONS}")
    if recompute not in RECOMPUTE:
        raise ValueError(f"unknown recompute {recompute!r}: {RECOMPUTE}")
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}: {DEVICES}")
    for k, v in sizes.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{k} must be a positive integer, got {v!r}")
    if sizes["hidden"] % sizes["heads"]:
        raise ValueError("hidden must be divisible by heads")


def _dtypes(precision: str, device: str) -> tuple[str, str, str]:
    """(residual stream, Linear inputs/outputs, LayerNorm statistics)."""
    if precision == "fp32":
        return "fp32", "fp32", "fp32"
    if precision == "autocast_bf16":   # autocast runs LayerNorm in fp32
        return "fp32", "bf16", "fp32"
    return "bf16", "bf16", ("fp32" if device == "cuda" else "bf16")


def _gpt(hidden: int, heads: int, mlp_ratio: int):
    """The record of one GPT block's shape (layers, vocab and positions
    do not change what a block keeps)."""
    from labkit.predict.model.arch import gpt
    return gpt(1, hidden, heads, 1, 1, mlp_ratio)


def gpt_block_saved(a, batch: int, seq: int, precision: str = "fp32",
                    recompute: str = "none", device: str = "cpu",
                    where: str = "block") -> list[Saved]:
    """What one :class:`labkit.nn.model.Block` of the record ``a`` (the GPT
    layout: fused QKV, LayerNorm, GELU MLP of width ``a.ffn``) keeps, its
    input included."""
    b, s, h, hd, f = batch, seq, a.hidden, a.heads, a.ffn
    d = a.head_dim
    res, lin, stat = _dtypes(precision, device)
    cast = precision == "autocast_bf16"

    def S(name, shape, dtype, kind="activation"):
        return Saved(where, name, shape, dtype, kind)
    inp = S("input (ln1 input)", (b, s, h), res)
    everything = [
        inp,
        S("ln1.mean", (b, s, 1), stat), S("ln1.rstd", (b, s, 1), stat),
        S("qkv input (ln1 output)", (b, s, h), lin),
        *([S("qkv.weight (bf16 copy)", (3 * h, h), "bf16", "weight_cast")]
          if cast else []),
        S("qkv.out", (b, s, 3 * h), lin),         # q, k, v are its views
        S("sdpa.out", (b, hd, s, d), lin),        # = attn.proj input
        S("sdpa.lse", (b, hd, s), "fp32"),
        *([S("attn.proj.weight (bf16 copy)", (h, h), "bf16", "weight_cast")]
          if cast else []),
        S("ln2 input (residual)", (b, s, h), res),
        S("ln2.mean", (b, s, 1), stat), S("ln2.rstd", (b, s, 1), stat),
        S("mlp.fc input (ln2 output)", (b, s, h), lin),
        *([S("mlp.fc.weight (bf16 copy)", (f, h), "bf16", "weight_cast")]
          if cast else []),
        S("mlp.fc.out (gelu input)", (b, s, f), lin),
        S("gelu.out (mlp.proj input)", (b, s, f), lin),
        *([S("mlp.proj.weight (bf16 copy)", (h, f), "bf16",
             "weight_cast")] if cast else []),
    ]
    if recompute == "none":
        return everything
    if recompute == "full":        # the checkpoint holds the input only
        return [inp]
    kept = {"qkv.out": (b, s, 3 * h), "sdpa.out": (b, hd, s, d),
            "attn.proj.out": (b, s, h), "mlp.fc.out": (b, s, f),
            "mlp.proj.out": (b, s, h)}
    return [inp] + [S(n, kept[n], lin) if n != "sdpa.lse"
                    else S(n, (b, hd, s), "fp32") for n in SELECTIVE_SAVE]


def block_saved(batch: int, seq: int, hidden: int, heads: int,
                mlp_ratio: int = 4, precision: str = "fp32",
                recompute: str = "none", device: str = "cpu",
                where: str = "block") -> list[Saved]:
    """What one :class:`labkit.nn.model.Block` keeps, its input included
    (positional; :func:`gpt_block_saved` of the GPT record)."""
    _check(precision, recompute, device, batch=batch, seq=seq,
           hidden=hidden, heads=heads, mlp_ratio=mlp_ratio)
    return gpt_block_saved(_gpt(hidden, heads, mlp_ratio), batch, seq,
                           precision, recompute, device, where)




def total(entries, kind: str | None = None) -> int:
    """Bytes of the entries (of one ``kind``: activation / weight_cast)."""
    return sum(e.bytes for e in entries if kind is None or e.kind == kind)




def korthikanti_terms(seq: int, batch: int, hidden: int, heads: int,
                      mlp_ratio: int = 4, precision: str = "fsdp_bf16",
                      device: str = "cuda") -> list[dict]:
    """Korthikanti et al. 2022 (Sec. 4.1, Table 2) term by term, beside ours.

    Each row: the paper's term (16-bit, with dropout, attention matrix
    materialised) and what this GPT keeps for it under ``precision``, in
    bytes, for one layer without recomputation. The paper's sum is
    ``s b h (34 + 5 a s / h)``.
    """
    s, b, h, a, r = seq, batch, hidden, heads, mlp_ratio
    sbh = s * b * h
    ours = {e.name: e.bytes for e in block_saved(
        b, s, h, a, r, precision, "none", device)}
    rows = [
        ("LayerNorm inputs (2 x 2sbh)", 4 * sbh,
         ours["input (ln1 input)"] + ours["ln2 input (residual)"]),
        ("QKV input", 2 * sbh, ours["qkv input (ln1 output)"]),
        ("Q, K (QK^T inputs) and V", 6 * sbh, ours["qkv.out"]),
        ("softmax output + its dropout mask and output (5as^2b)",
         5 * a * s * s * b, 0),
        ("attention output (proj input)", 2 * sbh, ours["sdpa.out"]),
        ("attention dropout mask", sbh, 0),
        ("MLP fc input", 2 * sbh, ours["mlp.fc input (ln2 output)"]),
        ("GELU input", 2 * r * sbh, ours["mlp.fc.out (gelu input)"]),
        ("MLP proj input", 2 * r * sbh, ours["gelu.out (mlp.proj input)"]),
        ("MLP dropout mask", sbh, 0),
        ("SDPA log-sum-exp (not in the paper)", 0, ours["sdpa.lse"]),
        ("LayerNorm mean and rstd (not in the paper)", 0,
         sum(v for k, v in ours.items() if k.endswith(("mean", "rstd")))),
        ("bf16 weight copies (autocast; not activations)", 0,
         sum(v for k, v in ours.items() if "(bf16 copy)" in k)),
    ]
    return [{"term": t, "paper": p, "ours": o} for t, p, o in rows]


def table(entries) -> str:
    """The ledger as text: where, name, shape, dtype, bytes."""
    lines = [f"{'where':9s} {'tensor':34s} {'shape':18s} {'dtype':6s}"
             f" {'bytes':>12s}"]
    for e in entries:
        lines.append(f"{e.where:9s} {e.name:34s} {str(e.shape):18s} "
                     f"{e.dtype:6s} {e.bytes:12,d}")
    lines.append(f"{'total':70s} {total(entries):12,d}")
    return "\n".join(lines)
