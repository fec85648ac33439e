"""What a fix should buy, before measuring it: two small what-if models.

    from labkit.measure.trace import what_if
    what_if.data_wait(load_ms=40, train_ms=10, num_workers=2)
    # [40.0, 0.0, 20.0, 0.0, ...]: 10 ms a step once the queue runs
    what_if.ddp_buckets([4 * 2**20] * 30, bucket_cap_mb=25)

:func:`data_wait` models ``torch.utils.data.DataLoader``'s workers and
prefetch buffer: in steady state a step waits
``max(0, load_ms / num_workers - train_ms)``. :func:`ddp_buckets` gives the
gradient buckets of DDP in the order they are reduced, by the greedy rule
of :func:`labkit.predict.sharding.ddp_buckets`. The doctor
(:mod:`labkit.measure.trace.doctor`, which re-exports both) points at them in
its advice. Pure Python.
"""
from __future__ import annotations


def data_wait(load_ms: float, train_ms: float, num_workers: int,
              prefetch_factor: int = 2, steps: int = 10,
              head_start_ms: float = 0.0) -> list[float]:
    """Predicted wait for the next batch at each step, in ms.

    A model of ``torch.utils.data.DataLoader`` (its
    ``_MultiProcessingDataLoaderIter``): at the start ``num_workers *
    prefetch_factor`` batch indices are handed out round-robin; each
    batch handed back to the training loop hands out one more. A worker
    loads its batches one after another, ``load_ms`` each; the loop asks
    for a batch, trains ``train_ms``, asks again. ``head_start_ms`` is the
    time between creating the iterator and the first request.
    With ``num_workers=0`` the loop loads every batch itself. In steady
    state the wait is ``max(0, load_ms / num_workers - train_ms)``: the
    prefetch buffer changes how soon that state is reached, not the rate.
    """
    if num_workers < 0 or prefetch_factor < 1 or steps < 0:
        raise ValueError("need num_workers >= 0, prefetch_factor >= 1, "
                         "steps >= 0")
    if load_ms < 0 or train_ms < 0:
        raise ValueError("times must be >= 0")
    if num_workers == 0:
        return [float(load_ms)] * steps
    w, depth = num_workers, num_workers * prefetch_factor
    free = [0.0] * w          # when each worker is next free
    ready: dict[int, float] = {}

    def hand_out(b: int, at: float) -> None:
        j = b % w
        free[j] = max(free[j], at) + load_ms
        ready[b] = free[j]

    for b in range(min(depth, steps)):
        hand_out(b, 0.0)
    waits, ask = [], float(head_start_ms)
    for s in range(steps):
        got = max(ask, ready[s])
        waits.append(got - ask)
        if s + depth < steps:
            hand_out(s + depth, got)
        ask = got + train_ms
    return waits


def ddp_buckets(param_bytes: list[int],
                bucket_cap_mb: float | None = None) -> list[int]:
    """Bytes of each DDP gradient bucket, in the order they are reduced.

    ``param_bytes`` in ``model.parameters()`` order; DDP fills buckets in
    the order gradients become ready, roughly the reverse, with the greedy
    rule of :func:`labkit.predict.sharding.ddp_buckets` (1 MiB first bucket
    when ``bucket_cap_mb`` is left at its default). One all-reduce per
    bucket per step.
    """
    from labkit.predict.sharding import ddp_buckets as predict_buckets
    return predict_buckets(list(reversed(param_bytes)), bucket_cap_mb)
