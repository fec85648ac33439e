"""Pipeline schedules: the order of operations on each rank (pure Python).

    from labkit.predict.pipeline_parallel.schedules import rank_order
    rank_order("1f1b", 4, 8)[0]   # [("F", 0, 0), ("F", 1, 0), ...]

Notation of Narayanan et al. 2021 ("Efficient Large-Scale Language Model
Training on GPU Clusters Using Megatron-LM", SC'21): ``p`` stages,
``m`` micro-batches, ``v`` model chunks per rank. GPipe runs every forward
then every backward; 1F1B (PipeDream-Flush, Fig. 4 top) alternates after
a warm-up; interleaved 1F1B (Sec. 2.2.2) follows Megatron-LM's order.
:func:`_check` is the one check of a schedule's parameters that the
closed forms (:mod:`labkit.predict.pipeline_parallel.costs`) and the simulator
(:mod:`labkit.predict.pipeline_parallel.simulator`) share.
"""
from __future__ import annotations

SCHEDULES = ("gpipe", "1f1b", "interleaved")


def _check(schedule: str, stages: int, microbatches: int,
           chunks: int = 1) -> None:
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}: choose from "
                         f"{', '.join(SCHEDULES)}")
    for name, v in (("stages", stages), ("microbatches", microbatches),
                    ("chunks", chunks)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if schedule != "interleaved" and chunks != 1:
        raise ValueError(f"--chunks {chunks} needs the interleaved schedule "
                         f"({schedule} has one chunk per rank)")
    if schedule == "interleaved" and microbatches % stages:
        # Megatron's interleaved schedule walks micro-batches in groups of p
        # (Narayanan et al. 2021, Sec. 2.2.2).
        raise ValueError(f"the interleaved schedule needs micro-batches "
                         f"({microbatches}) to be a multiple of the stages "
                         f"({stages})")


def rank_order(schedule: str, stages: int, microbatches: int,
               chunks: int = 1) -> dict[int, list[tuple[str, int, int]]]:
    """``{rank: [(kind, microbatch, chunk), ...]}`` in execution order.

    ``kind`` is ``"F"`` or ``"B"``; ``chunk`` is the model chunk on that
    rank (global stage ``chunk * p + rank``). GPipe: all forwards, then all
    backwards. 1F1B: ``p - rank - 1`` warm-up forwards, then one forward and
    one backward in turn, then the remaining backwards (PipeDream-Flush,
    Narayanan et al. 2021, Fig. 4 top). Interleaved: Megatron-LM's order
    (``forward_backward_pipelining_with_interleaving``): forwards walk the
    chunks in groups of ``p`` micro-batches, with ``2(p - rank - 1) +
    (v - 1)p`` warm-up forwards.
    """
    _check(schedule, stages, microbatches, chunks)
    p, m, v = stages, microbatches, chunks
    order: dict[int, list[tuple[str, int, int]]] = {}
    for r in range(p):
        if schedule == "gpipe":
            ops = [("F", i, 0) for i in range(m)] + \
                  [("B", i, 0) for i in range(m)]
        elif schedule == "1f1b":
            warm = min(p - r - 1, m)
            ops = [("F", i, 0) for i in range(warm)]
            for i in range(m - warm):
                ops += [("F", warm + i, 0), ("B", i, 0)]
            ops += [("B", i, 0) for i in range(m - warm, m)]
        else:
            total = m * v

            def unit(k: int, forward: bool) -> tuple[int, int]:
                in_group = k % (p * v)
                chunk = in_group // p
                mb = (k // (p * v)) * p + in_group % p
                return mb, (chunk if forward else v - 1 - chunk)

            warm = total if m == p else min(2 * (p - r - 1) + (v - 1) * p,
                                            total)
            ops = [("F", *unit(k, True)) for k in range(warm)]
            for k in range(total - warm):
                ops += [("F", *unit(warm + k, True)), ("B", *unit(k, False))]
            ops += [("B", *unit(k, False)) for k in range(total - warm, total)]
        order[r] = ops
    return order
