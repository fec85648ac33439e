"""Number formats, what each training recipe keeps in which dtype, and the
ledger of FP8 training (pure Python, no torch).

    from labkit.predict import precision as P
    P.format_facts("bf16")          # max, eps, smallest normal, ... (bits)
    P.recipe_bytes("fsdp2_bf16", gpus=4)   # bytes per parameter per rank
    P.fp8_ledger(arch.preset("llama3-8b"), gpus=8, seq=8192)

Formats. A binary float with ``e`` exponent bits and ``m`` mantissa bits
has bias ``2^(e-1) - 1``, machine epsilon ``2^-m``, smallest normal
``2^(1 - bias)`` and smallest subnormal ``2^(1 - bias - m)`` (IEEE 754).
Its largest finite value is ``(2 - 2^-m) 2^(2^e - 2 - bias)`` when the top
exponent is kept for inf/NaN (fp32, bf16, fp16, e5m2); OCP's ``e4m3fn``
keeps only one NaN pattern (exponent and mantissa all ones), so its top
exponent holds numbers up to ``(2 - 2^(1-m)) 2^(2^e - 1 - bias)`` = 448
(Micikevicius et al. 2022, "FP8 Formats for Deep Learning", Table 1). The
measured twin is ``torch.finfo`` (:mod:`labkit.measure.precision`).

Recipes: the bytes per parameter come from chapter 1's ledger
(:func:`labkit.predict.memory.bytes_per_param`); this file only says which
of its cases each recipe is, and what it adds per step.
"""
from __future__ import annotations

import math

from labkit.predict.memory import bytes_per_param

# name: (exponent bits, mantissa bits, top exponent kept for inf/NaN)
FORMATS = {
    "fp32": (8, 23, True),
    "bf16": (8, 7, True),
    "fp16": (5, 10, True),
    "e4m3": (4, 3, False),     # float8_e4m3fn: no inf, one NaN
    "e5m2": (5, 2, True),
}
ITEMSIZE = {"fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2, "e4m3": 1,
            "e5m2": 1}


def format_facts(name: str) -> dict:
    """Range and precision of a format from its bit layout alone."""
    if name not in FORMATS:
        raise ValueError(f"unknown format {name!r}: {', '.join(FORMATS)}")
    e, m, ieee = FORMATS[name]
    bias = 2 ** (e - 1) - 1
    if ieee:
        top = (2 - 2.0 ** -m) * 2.0 ** (2 ** e - 2 - bias)
    else:
        top = (2 - 2.0 ** (1 - m)) * 2.0 ** (2 ** e - 1 - bias)
    normal = 2.0 ** (1 - bias)
    return {"bits": 1 + e + m, "exponent_bits": e, "mantissa_bits": m,
            "max": top, "eps": 2.0 ** -m, "smallest_normal": normal,
            "smallest_subnormal": 2.0 ** (1 - bias - m),
            # the dynamic range in powers of two, normal numbers only
            "binades": math.log2(top / normal)}


def unit_roundoff(name: str) -> float:
    """u = eps / 2: the largest relative error of one round-to-nearest."""
    return format_facts(name)["eps"] / 2


# -- recipes: what each keeps, in bytes per parameter ----------------------

RECIPES = ("fp32", "autocast_bf16", "fsdp2_bf16", "deepspeed_bf16",
           "megatron_bf16", "fp8")


def recipe_bytes(recipe: str, gpus: int = 1) -> dict:
    """Per rank and per parameter: what a recipe holds between steps
    (``params``, ``grads``, ``optimizer``, sharded over ``gpus`` where the
    recipe shards) and what it makes per step (``cast``: the low-precision
    weight copy a matmul reads; ``gather`` / ``reduce``: bytes per
    parameter through FSDP's all-gather and reduce-scatter, 0 when the
    recipe runs on one rank).

    - ``fp32``: Adam in fp32, 4 + 4 + 8 (the ledger's ``fp32``).
    - ``autocast_bf16``: fp32 weights, gradients and Adam (16 bytes, the
      ledger's ``fp32``); autocast casts each matmul weight to bf16 in the
      forward and keeps the cast for backward (+2 per matmul weight).
    - ``fsdp2_bf16``: ``MixedPrecisionPolicy(param_dtype=bf16,
      reduce_dtype=fp32)`` over fp32 sharded parameters: 16 / N at rest;
      the all-gather carries bf16 (2), the reduce-scatter fp32 (4).
    - ``deepspeed_bf16``: the ZeRO paper's mixed precision, 2 + 2 + 12
      (bf16 weights and gradients, fp32 master, momentum and variance);
      ZeRO-3 shards all three terms.
    - ``megatron_bf16``: the same with fp32 ``main_grad`` (2 + 4 + 12).
    - ``fp8``: FSDP2 as ``fsdp2_bf16`` with the matmul weights cast to
      e4m3 before the all-gather (1 byte through it, torchao's
      ``enable_fsdp_float8_all_gather``); states unchanged.
    """
    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}: {', '.join(RECIPES)}")
    if not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"gpus must be an integer >= 1, got {gpus!r}")
    fp32, mixed = bytes_per_param("fp32"), bytes_per_param("mixed")
    n = gpus
    if recipe in ("fp32", "autocast_bf16"):
        b = fp32
        out = {"params": b.params, "grads": b.grads,
               "optimizer": b.optimizer, "gather": 0, "reduce": 0,
               "cast": 2 if recipe == "autocast_bf16" else 0}
    elif recipe in ("fsdp2_bf16", "fp8"):
        b = fp32
        out = {"params": b.params / n, "grads": b.grads / n,
               "optimizer": b.optimizer / n,
               "gather": (2 if recipe == "fsdp2_bf16" else 1) if n > 1
               else 0,
               "reduce": 4 if n > 1 else 0,
               "cast": 2 if recipe == "fsdp2_bf16" else 1}
    else:
        b = mixed if recipe == "deepspeed_bf16" else bytes_per_param(
            "mixed", fp32_grads=True)
        out = {"params": b.params / n, "grads": b.grads / n,
               "optimizer": b.optimizer / n, "cast": 0,
               "gather": 2 if n > 1 else 0,
               "reduce": b.grads if n > 1 else 0}
    out["states"] = out["params"] + out["grads"] + out["optimizer"]
    return out


# -- accumulation and reduction error: the bounds --------------------------

def sum_error_bound(n: int, fmt: str) -> float:
    """Relative error bound of a recursive sum of ``n`` terms rounded to
    ``fmt`` after each addition: ``gamma_{n-1} = (n-1)u / (1 - (n-1)u)``
    (Higham 2002, "Accuracy and Stability of Numerical Algorithms", Ch.
    4), relative to the sum of the terms' magnitudes, so a bound of the
    relative error for terms of one sign; the typical error of independent
    roundings grows like ``sqrt(n) u`` instead."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    nu = (n - 1) * unit_roundoff(fmt)
    return nu / (1 - nu) if nu < 1 else math.inf


def store_error(fmt: str) -> float:
    """Relative error of storing an exact value in ``fmt``: at most u."""
    return unit_roundoff(fmt)


# -- FP8 training: what stays where, what it saves ------------------------

# Dense FP8 tensor-core peaks, TFLOP/s (twice the bf16 peaks of gpus.py).
FP8_PEAKS = {"h100": (1978.9, "NVIDIA H100 SXM: FP8 tensor core 3,958 "
                      "TFLOPS with sparsity, 1,979 dense"),
             "h200": (1978.9, "NVIDIA H200 SXM datasheet: FP8 3,958 "
                      "TFLOPS with sparsity, 1,979 dense")}


def fp8_ledger(a, gpus: int = 8, seq: int = 4096, micro_batch: int = 1,
               gpu: str = "h100") -> dict:
    """FP8 training of the record ``a`` on ``gpus`` FSDP2 ranks, beside
    bf16, in the DeepSeek-V3 recipe (DeepSeek-AI 2024, Sec. 3.3.1-3.3.3):

    - FP8 (e4m3, scaled per 1x128 activation tile and 128x128 weight
      block): the inputs of the layers' linear projections (Fprop, Dgrad
      and Wgrad GEMMs), and the activations those linears save;
    - bf16/fp32: embedding, output head, norms, attention core (the
      ``12 L H Q T`` FLOPs), master weights, gradients, Adam (fp32).

    Returns bytes per rank (model states, the all-gathered weights per
    step, the linears' saved inputs per micro-batch) and FLOPs (the share
    that runs in FP8 and the step time at the two peaks, compute-bound).
    """
    from labkit.predict.model import flops as F
    from labkit.predict.model import params as PP
    from labkit.predict.gpus import PEAKS
    f = F.arch_flops(a, micro_batch, seq)
    psi, mm = f["params"], f["matmul_params"]
    head = a.vocab * a.hidden
    layer_mm = mm - head             # FP8 weights: the layers' linears
    tokens = f["tokens"]
    fp8_flops = 6 * layer_mm * tokens
    total = f["model_flops"]
    bf16_peak = PEAKS[gpu][0] * 1e12
    fp8_peak = FP8_PEAKS[gpu][0] * 1e12
    states = recipe_bytes("fp8", gpus)["states"] * psi
    # per layer, per token, what the linears save: the inputs of the QKV
    # (one, shared), output, gate/up (one, shared) and down projections
    per_token = 3 * a.hidden + (a.ffn or 4 * a.hidden)
    saved_bf16 = 2 * per_token * a.layers * tokens
    gathered = {"bf16": 2 * 2 * psi,          # forward + backward gathers
                "fp8": 2 * (2 * (psi - layer_mm) + 1 * layer_mm)}
    return {
        "params": psi, "fp8_params": layer_mm, "states_per_rank": states,
        "states_bf16_per_rank": recipe_bytes("fsdp2_bf16", gpus)["states"]
        * psi,
        "gather_bytes": gathered, "saved_linear_inputs": {
            "bf16": saved_bf16, "fp8": saved_bf16 / 2},
        "flops": total, "fp8_flops": fp8_flops,
        "fp8_share": fp8_flops / total,
        "step_s_bf16": total / bf16_peak,
        "step_s_fp8": fp8_flops / fp8_peak + (total - fp8_flops) / bf16_peak,
        "speedup_bound": total / (fp8_flops / fp8_peak * bf16_peak
                                  + total - fp8_flops),
        "per_layer_params": PP.count(a)["per_layer"],
    }
