"""Pipeline parallelism in closed form: bubble, memory, point-to-point bytes.

    from labkit.predict.pipeline_parallel.costs import bubble_fraction
    bubble_fraction("interleaved", 4, 8, chunks=2)   # (p - 1) / (v m)

The formulas of Narayanan et al. 2021 ("Efficient Large-Scale Language
Model Training on GPU Clusters Using Megatron-LM", SC'21): the bubble
``(p - 1) / m`` (Sec. 2.2.1) and ``(p - 1) / (v m)`` interleaved
(Sec. 2.2.2), the point-to-point volume (Sec. 3.2, 4.1); and the first
stage's activations of Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models", Sec. 4.2.3). The simulator
(:mod:`labkit.predict.pipeline_parallel.simulator`) is held to them by the tests.
"""
from __future__ import annotations

from labkit.predict.pipeline_parallel.schedules import SCHEDULES
from labkit.predict.pipeline_parallel.schedules import _check as _check_any


def _check(schedule: str, stages: int, microbatches: int,
           chunks: int = 1) -> None:
    """The schedules with a closed form here; the split ones (chapter
    18) are simulated (``zero_bubble.zb_h1_bubble`` for ZB-H1)."""
    _check_any(schedule, stages, microbatches, chunks)
    if schedule not in SCHEDULES:
        raise ValueError(f"{schedule}: no closed form here; simulate it "
                         "(labkit.predict.pipeline_parallel.simulator)")


def bubble_fraction(schedule: str, stages: int, microbatches: int,
                    chunks: int = 1) -> float:
    """Pipeline bubble time over ideal time, ``t_pb / t_id``.

    GPipe and 1F1B: ``(p - 1) / m`` (Narayanan et al. 2021, Sec. 2.2.1:
    ``t_pb = (p - 1)(t_f + t_b)``, ``t_id = m (t_f + t_b)``); 1F1B changes
    the memory, not the bubble. Interleaved 1F1B with ``v`` chunks per
    rank: ``(p - 1) / (v m)`` (Sec. 2.2.2). Note the denominator is the
    ideal time, not the step time: the share of the step a rank is idle is
    :func:`idle_fraction`.
    """
    _check(schedule, stages, microbatches, chunks)
    return (stages - 1) / (chunks * microbatches)


def idle_fraction(schedule: str, stages: int, microbatches: int,
                  chunks: int = 1) -> float:
    """Share of the step a rank waits: ``t_pb / (t_id + t_pb)``."""
    b = bubble_fraction(schedule, stages, microbatches, chunks)
    return b / (1 + b)


def first_stage_activations(schedule: str, stages: int, microbatches: int,
                            chunks: int = 1) -> float:
    """Micro-batches of activations the first stage holds at its peak.

    In units of one micro-batch through one whole stage (``L/p`` layers).
    GPipe keeps every forward until the backward phase: ``m``. 1F1B
    (PipeDream-Flush) keeps at most ``p`` in flight (Narayanan et al. 2021,
    Sec. 2.2.1). Interleaved 1F1B keeps ``p + (p - 1)/v``, i.e. the memory of
    1F1B times ``1 + (p - 1)/(p v)`` (Korthikanti et al. 2022, Sec. 4.2.3).
    Multiply by ``L/p`` times the per-layer activation bytes of
    :mod:`labkit.predict.memory` to get bytes.
    """
    _check(schedule, stages, microbatches, chunks)
    p, m, v = stages, microbatches, chunks
    if schedule == "gpipe":
        return float(m)
    if schedule == "1f1b":
        return float(min(p, m))
    if m == p:  # Megatron runs every forward first when m == p
        return float(m)
    return p + (p - 1) / v


def p2p_bytes(micro_batch: int, seq: int, hidden: int, microbatches: int,
              chunks: int = 1, bytes_per_element: int = 2,
              tensor_parallel: int = 1, scatter_gather: bool = False) -> int:
    """Bytes one interior rank sends per iteration (forward + backward).

    Each micro-batch crosses a stage boundary forward as a ``b x s x h``
    activation and backward as a gradient of the same shape (Narayanan et
    al. 2021, Sec. 3.2); interleaving crosses ``v`` times as many
    boundaries (Sec. 2.2.2: "the amount of communication also increases by
    v"). With tensor parallelism the ``t`` ranks of a stage hold the same
    activation; the scatter/gather optimisation (Sec. 4.1) sends only
    ``1/t`` of it from each of them.
    """
    for name, v in (("micro_batch", micro_batch), ("seq", seq),
                    ("hidden", hidden), ("microbatches", microbatches),
                    ("chunks", chunks), ("tensor_parallel", tensor_parallel)):
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v!r}")
    per_message = micro_batch * seq * hidden * bytes_per_element
    if scatter_gather:
        per_message //= tensor_parallel
    return 2 * microbatches * chunks * per_message
