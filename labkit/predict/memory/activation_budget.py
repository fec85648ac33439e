"""Activation bytes per layer in Korthikanti et al. 2022's closed form,
and how many layers fit one GPU (pure Python). Re-exported by
:mod:`labkit.predict.memory`, where chapter 1 and the planner find them.

    from labkit.predict.memory import activation_bytes_model
    activation_bytes_model(80, 4096, 1, 8192, 64) / 1e9   # GB, 70B GPT

The op-by-op ledger that the labs measure to the byte is
:mod:`labkit.predict.activations`.
"""
from __future__ import annotations

from labkit.predict.memory.job import on_gpu
from labkit.predict.model.params import gpt_params


def activation_bytes_per_layer(seq: int, batch: int, hidden: int, heads: int,
                               tp: int = 1, sequence_parallel: bool = False,
                               recompute: str = "none") -> float:
    """Activation bytes one transformer layer stores for backward (16-bit).

    Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
    Transformer Models", Table 2 (s = seq, b = micro-batch, h = hidden,
    a = heads, t = tensor-parallel size):
      no parallelism          s b h (34 + 5 a s / h)
      tensor parallel         s b h (10 + 24/t + 5 a s / (h t))
      tensor + sequence par.  s b h / t (34 + 5 a s / h)
      selective recompute     drops the 5 a s / h attention term
      full recompute          2 s b h  (only the layer input is kept)
    """
    if recompute not in ("none", "selective", "full"):
        raise ValueError(f"unknown recompute {recompute!r}")
    for name, v in dict(seq=seq, batch=batch, hidden=hidden, heads=heads,
                        tp=tp).items():
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    s, b, h, a, t = seq, batch, hidden, heads, tp
    sbh = s * b * h
    if recompute == "full":
        return 2.0 * sbh
    attn = 0.0 if recompute == "selective" else 5.0 * a * s / h
    if sequence_parallel:
        return sbh / t * (34 + attn)
    return sbh * (10 + 24 / t + attn / t)


def activation_bytes_model(layers: int, seq: int, batch: int, hidden: int,
                           heads: int, fused_attention: bool = True,
                           recompute: str = "none") -> float:
    """Activation bytes of ``layers`` transformer layers (16-bit), the
    headline figure of chapter 1.

    Korthikanti et al. 2022, Table 2: ``s b h (34 + 5 a s / h)`` per layer
    counts the ``a s^2 b`` attention scores, their softmax and its dropout
    mask (the ``5 a s / h`` term). A fused attention kernel
    (FlashAttention, Dao et al. 2022, Sec. 3.1; PyTorch's
    ``scaled_dot_product_attention``, which the course's GPT uses) keeps
    only its inputs, output and the per-row softmax statistics and
    recomputes the scores in backward, so that term is not stored:
    ``34 s b h`` per layer (``fused_attention=True``, the realistic figure).
    ``fused_attention=False`` is the paper's accounting of an eager
    attention. Full recomputation keeps ``2 s b h`` either way.
    """
    if not isinstance(layers, int) or layers < 1:
        raise ValueError(f"layers must be a positive integer, got {layers!r}")
    if recompute == "none" and fused_attention:
        recompute = "selective"   # the same bytes: no attention scores
    return layers * activation_bytes_per_layer(seq, batch, hidden, heads,
                                               recompute=recompute)


def layers_that_fit(gpu_bytes: float, layers: int, hidden: int, heads: int,
                    vocab: int, seq: int, micro_batch: int,
                    bytes_per_param: float = 16.0) -> int:
    """The most layers, up to ``layers``, one GPU can train (0: none).

    Model states ``bytes_per_param x Psi`` (16: mixed-precision Adam, or fp32
    Adam, ZeRO paper Sec. 3.1), the activations of Korthikanti et al.
    2022, Table 2 (16-bit, no recomputation: an upper bound for kernels that
    keep no attention matrix) and the output layer's fp32 logits with their
    gradient (``8 s b V`` bytes, held together as the backward starts; the
    table counts the transformer layers only) are what the rank allocates;
    with the runtime floor on top they must leave the margin of the GPU
    free: the rule preflight and the rehearsal judge every case by
    (:func:`labkit.predict.memory.job.on_gpu`).
    """
    if not gpu_bytes > 0:
        raise ValueError("gpu_bytes must be > 0")
    act = activation_bytes_per_layer(seq, micro_batch, hidden, heads)
    logits = 8.0 * seq * micro_batch * vocab
    for n in range(layers, 0, -1):
        psi = gpt_params(n, hidden, heads, vocab, seq)
        if on_gpu(bytes_per_param * psi + n * act + logits, 1,
                  gpu_bytes)["fits"]:
            return n
    return 0
