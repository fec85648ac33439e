"""The backward split in two, and what it buys each schedule (pure).

    from labkit.predict.pipeline_parallel import zero_bubble as Z
    Z.linear_flops(8, 64, 64)      # {"F": 65536, "I": 65536, "W": 65536}
    Z.peak_bytes("zbv", 2, 4, layers=8, hidden=64, micro_batch=8)
    Z.when_pays(4, 8)              # the table of chapter 18

A linear layer ``Y = X W^T`` has one matrix product forward and two
backward: ``dX = dY W`` (``I``, what the previous stage waits for) and
``dW = dY^T X`` (``W``, what only the optimizer waits for), each
``2 b n_in n_out`` FLOPs (Qi et al. 2024, "Zero Bubble Pipeline
Parallelism", Sec. 2; Narayanan et al. 2021, Sec. 5.1, count the same
``1 + 2`` products). ``I`` needs ``W``'s matrix, ``W`` needs ``X``: so
``W`` can run later, but the layer's input stays until it has.

The schedules' orders are :func:`labkit.predict.pipeline_parallel.
schedules.rank_order`; the times, bubbles and micro-batches held come
from the simulator (:mod:`labkit.predict.pipeline_parallel.simulator`);
the bytes, from what the lab's stage saves for backward.
"""
from __future__ import annotations

from labkit.predict.pipeline_parallel.schedules import (
    V_SHAPE, _check, rank_order)
from labkit.predict.pipeline_parallel.simulator import simulate


def linear_flops(batch: int, n_in: int, n_out: int) -> dict:
    """FLOPs of one linear layer's forward ``F``, input gradient ``I``
    and weight gradient ``W`` (a multiply and an add per term)."""
    one = 2 * batch * n_in * n_out
    return {"F": one, "I": one, "W": one}


def weight_share(batch: int, n_in: int, n_out: int) -> float:
    """The share of the backward that can be deferred: ``W / (I + W)``."""
    f = linear_flops(batch, n_in, n_out)
    return f["W"] / (f["I"] + f["W"])


def zb_h1_bubble(stages: int, microbatches: int, t_f: float = 1.0,
                 t_i: float = 1.0, t_w: float = 1.0) -> float:
    """ZB-H1's bubble over the ideal time: ``(p - 1)(t_F + t_I - t_W)``
    over ``m (t_F + t_I + t_W)`` (Qi et al. 2024, Sec. 3.1; 1F1B's is
    ``(p - 1)(t_F + t_I + t_W)`` over the same)."""
    _check("zb-h1", stages, microbatches)
    return ((stages - 1) * (t_f + t_i - t_w)
            / (microbatches * (t_f + t_i + t_w)))


def stage_saved_bytes(layers: int, hidden: int, micro_batch: int,
                      bytes_per_element: int = 4) -> int:
    """Bytes autograd saves in one forward of ``layers`` blocks of
    ``Linear(h, h)`` and ``Tanh``: each Linear keeps its input (for
    ``W``), each Tanh its output (for ``I``), and a block's output is the
    next one's input: ``layers + 1`` tensors of ``b x h``."""
    return (layers + 1) * micro_batch * hidden * bytes_per_element


def held(order: list, chunk_bytes: int) -> int:
    """The most bytes one rank's ``order`` holds at once: a forward adds
    its micro-batch's, a ``B`` or a ``W`` frees them (``I`` frees
    nothing: ``W`` still needs the inputs)."""
    now = top = 0
    for kind, _, _ in order:
        now += {"F": 1, "B": -1, "I": 0, "W": -1}[kind] * chunk_bytes
        top = max(top, now)
    return top


def peak_bytes(schedule: str, stages: int, microbatches: int, layers: int,
               hidden: int, micro_batch: int,
               bytes_per_element: int = 4) -> list[int]:
    """Each rank's most activation bytes kept, ``layers`` split evenly
    over the ``p`` (or ``2p``, the V) stages."""
    v = 2 if schedule in V_SHAPE else 1
    _check(schedule, stages, microbatches, v)
    per = stage_saved_bytes(layers // (stages * v), hidden, micro_batch,
                            bytes_per_element)
    return [held(o, per) for o in
            rank_order(schedule, stages, microbatches, v).values()]


def when_pays(stages: int, microbatches: int, forward: float = 1.0,
              backward: float = 2.0, weight: float = 0.5) -> list[dict]:
    """Chapter 18's table: per schedule, the simulated bubble, step time
    over 1F1B's, the first and most loaded rank's activations in 1F1B's
    first-stage units, and what it asks of the job."""
    needs = {"1f1b": "m >= p",
             "zb-h1": "m >= p; W kept apart from I",
             "zbv": "2 chunks per rank; m >= 2p; W apart",
             "dualpipev": "2 chunks per rank; m >= 2p; W apart"}
    base = simulate("1f1b", stages, microbatches, 1, forward, backward,
                    weight=weight)
    rows = []
    for s in needs:
        v = 2 if s in V_SHAPE else 1
        try:
            tl = simulate(s, stages, microbatches, v, forward, backward,
                          weight=weight)
        except ValueError as e:
            rows.append({"schedule": s, "needs": needs[s], "error": str(e)})
            continue
        rows.append({"schedule": s, "needs": needs[s],
                     "bubble": tl.bubble,
                     "step_vs_1f1b": tl.makespan / base.makespan,
                     "peak_vs_1f1b": max(tl.peak_activations)
                     / max(base.peak_activations)})
    return rows

