"""Gradient accumulation: the collectives of one step of k micro-batches.

    from labkit.predict.sharding.accumulation import step_calls
    calls = step_calls(unit_shapes, 2, "ddp", micro_batches=4)

Pure Python. A step of ``k`` micro-batches adds their gradients and updates
once. What each strategy communicates for it (one rank's calls; the shapes
of each call are :func:`labkit.predict.sharding.calls.predict_calls`'s):

- ``ddp`` with ``no_sync()`` on the first k-1 micro-batches: the gradients
  accumulate locally and the last backward all-reduces once (PyTorch DDP
  docs, ``no_sync``); without it, k all-reduces of every bucket.
- ``fsdp2_full`` (FULL_SHARD) syncing every micro-batch: every micro-batch
  all-gathers each unit in forward and again in backward and
  reduce-scatters its gradient: k full steps.
- ``fsdp2_full`` with ``set_requires_gradient_sync(False)`` on the first
  k-1: the all-gathers stay (the weights are still sharded at rest), the
  reduce-scatters wait for the last micro-batch -- and meanwhile every rank
  holds the *unsharded* gradients (:func:`unsharded_grad_bytes`), the
  memory FULL_SHARD was meant to save.
"""
from __future__ import annotations

import math

from labkit.predict.sharding.calls import predict_calls

STRATEGIES = ("ddp", "fsdp2_full")


def step_calls(unit_shapes, world_size: int, strategy: str,
               micro_batches: int, no_sync: bool = True,
               param_bytes: int = 4, **kw) -> list[dict]:
    """One rank's collectives for a step of ``micro_batches``."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}: {STRATEGIES}")
    k = micro_batches
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"micro_batches must be an integer >= 1, got {k!r}")
    name = "ddp" if strategy == "ddp" else "full_shard"
    one = predict_calls(unit_shapes, world_size, name,
                        param_bytes=param_bytes, **kw)
    if not no_sync:
        return one * k
    if strategy == "ddp":
        return one
    gathers = [c for c in one if c["op"] == "all_gather"]
    return gathers * (k - 1) + one


def unsharded_grad_bytes(unit_shapes, world_size: int, strategy: str,
                         micro_batches: int, no_sync: bool = True,
                         grad_bytes: int = 4) -> int:
    """Gradient bytes a rank holds between micro-batches of one step.

    DDP: the full gradients (always). FSDP2: with gradient sync off, the
    unsharded gradients of every parameter (``unsharded_accumulated_grad``)
    until the last micro-batch reduce-scatters them; with sync on, only the
    sharded gradients (Psi / N).
    """
    psi = sum(math.prod(s) for unit in unit_shapes for s in unit)
    if strategy == "ddp":
        return psi * grad_bytes
    if no_sync and micro_batches > 1:
        return psi * grad_bytes
    return psi * grad_bytes // world_size


def summary(calls) -> dict:
    """``{op: {"calls", "bytes"}}``, the collective counter's shape."""
    from labkit.predict.sharding.calls import summarize
    return summarize(calls)


def deepspeed_step(params: int, stage: int, micro_batches: int,
                   grad_bytes: int = 4, param_bytes: int = 4,
                   gather_in_backward: bool = False) -> dict:
    """Bytes per collective of one DeepSpeed step of k micro-batches.

    ``{op: bytes}`` of the gradient- and weight-sized calls (the counter's
    logical payload) with the course's ZeroConfig
    (``use_multi_rank_bucket_allreduce``: ZeRO-1/2 reduce gradients with
    all-reduces of buckets):

    - ZeRO-1: gradients accumulate locally and are all-reduced once, at
      the accumulation boundary; the updated shards are all-gathered once.
    - ZeRO-2: the gradients are partitioned, so every micro-batch's
      backward reduces them into the owner's partition: k all-reduces of
      Psi; one all-gather after the step.
    - ZeRO-3: every micro-batch all-gathers the weights and
      reduce-scatters the gradients: k of each; a second all-gather in
      backward when the weights were released after forward
      (``gather_in_backward``: Psi above ``stage3_max_live_parameters`` or
      a short ``stage3_max_reuse_distance``; the tiny GPT keeps them).
    """
    k = micro_batches
    if stage not in (1, 2, 3):
        raise ValueError(f"DeepSpeed ZeRO stage must be 1, 2 or 3: {stage!r}")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"micro_batches must be an integer >= 1, got {k!r}")
    g, p = params * grad_bytes, params * param_bytes
    if stage == 1:
        return {"all_reduce": g, "all_gather": p}
    if stage == 2:
        return {"all_reduce": k * g, "all_gather": p}
    return {"all_gather": k * p * (2 if gather_in_backward else 1),
            "reduce_scatter": k * g}
