"""The fraction of the peak a layout's matmuls reach, from the roofline.

    from labkit.predict.choosing.matmul_time import matmul_efficiency
    matmul_efficiency(model, tokens=8192, tp=8, peak="h100-sxm",
                      efficiency=0.5)

The planner's step time (:func:`labkit.predict.choosing.layout_cost.
step_time`) divides a micro-batch's hardware FLOPs by this fraction of
the dense peak instead of one assumed efficiency for every shape: one
layer's matmuls on one tensor-parallel rank, each priced by
:func:`labkit.predict.roofline.step_time` (Williams et al. 2009:
``max(F / roof, B / bandwidth)``), the roof at the kernels' measured
fraction of the peak (``--efficiency``, the calibrated roofline), the
slope at the chip's HBM bandwidth (the data sheets of
:data:`labkit.predict.roofline.CHIPS`). A matmul above the ridge point
reaches ``efficiency``; a thin one (few tokens per rank, a wide TP split
of a narrow layer) less, bound by its weight's bytes.
"""
from __future__ import annotations

from labkit.predict import roofline as R
from labkit.predict.model import flops as _flops


def layer_matmuls(m, tokens: int, tp: int) -> list:
    """One layer's dense matmuls of the model ``m`` (its record,
    ``m.arch``) on one TP rank, as roofline ops (bf16): the Q, K, V and
    output projections and the MLP's matrices, each ``(tokens, d_in) @
    (d_in, d_out / tp)`` three times a step (forward and both
    gradients); K and V heads replicated beyond ``kv_heads`` stay
    whole. A mixture of experts' routed GEMMs are priced by
    :mod:`labkit.predict.choosing.plan_moe`; here only its attention."""
    a = m.arch
    kv = a.kv_dim // min(tp, a.kv_heads)
    shapes = [(a.hidden, a.q_dim // tp), (a.hidden, kv), (a.hidden, kv),
              (a.q_dim // tp, a.hidden)]
    if not a.experts:
        f = (a.ffn or 4 * a.hidden) // tp
        shapes += [(a.hidden, f)] * (1 + a.gated) + [(f, a.hidden)]
    ops = []
    for i, (k, n) in enumerate(shapes):
        fl, nb = R.matmul(tokens, max(1, k), max(1, n), 2)
        ops.append(R.Op(f"matmul {i}", "matmul", fl, nb, 3))
    return ops


def matmul_efficiency(m, tokens: int, tp: int, peak: str,
                      efficiency: float) -> float:
    """The fraction of the dense peak of ``peak`` (a key of
    :data:`labkit.predict.model.flops.PEAKS`) one layer's matmuls reach
    at ``tokens`` per rank: their FLOPs over the peak times their
    roofline time (:func:`labkit.predict.roofline.step_time`, roof at
    ``efficiency`` of the peak). ``efficiency`` itself for a chip without
    a data-sheet bandwidth in :data:`labkit.predict.roofline.CHIPS`."""
    chip = peak.split("-")[0]          # "h100-sxm" -> the data sheet's
    if chip not in R.CHIPS:
        return efficiency
    rate = _flops.peak_tflops(peak) * 1e12
    ops = layer_matmuls(m, tokens, tp)
    t = R.step_time(ops, rate, R.chip(chip)[1],
                    efficiency={"matmul": efficiency})["step_s"]
    return sum(o.flops * o.count for o in ops) / (rate * t)
