"""This rank's stages of chapter 18's model, and a record of what they do.

    model = build(layers=8, hidden=64, seed=0)
    sched, mods, events = make_schedule("zbv", model, rank=0, p=2, m=4,
                                        device=torch.device("cpu"))

The model is ``layers`` blocks of ``Linear(h, h)`` and ``Tanh``: every
block's forward is one matrix product, and so are both halves of its
backward, the input gradient ``dX = dY W^T`` (``I``) and the weight
gradient ``dW = X^T dY`` (``W``) -- the case the zero-bubble schedules
are drawn for (Qi et al. 2024, Sec. 2: ``t_F = t_B = t_W``).

:func:`make_schedule` cuts it into ``p`` stages (``1f1b``, ``zb-h1``) or
``2p`` (the V of ``zbv`` and ``dualpipev``: this rank holds stages ``r``
and ``2p - 1 - r``) and hands them to torch 2.13's ``Schedule1F1B``,
``ScheduleInterleavedZeroBubble``, ``ScheduleZBVZeroBubble`` or
``ScheduleDualPipeV``. :func:`record` wraps each stage's
``forward_one_chunk``, ``backward_one_chunk`` (``I`` when called with
``full_backward=False``, else ``B``) and ``backward_weight_one_chunk``
(``W``): each call appends ``(kind, stage, chunk, micro-batch, start,
end, saved)``, ``saved`` being the bytes autograd saved for backward in
that forward (a ``saved_tensors_hooks`` pack hook; each tensor once,
the parameters not counted).
"""
from __future__ import annotations

import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from labkit import device as D
from labkit.predict.pipeline_parallel.schedules import (V_SHAPE,
                                                        stage_index)

CLASSES = {"1f1b": "Schedule1F1B",
           "zb-h1": "ScheduleInterleavedZeroBubble",
           "zbv": "ScheduleZBVZeroBubble",
           "dualpipev": "ScheduleDualPipeV"}


def build(layers: int, hidden: int, seed: int = 0) -> nn.Sequential:
    """``layers`` blocks of Linear and Tanh, the same on every rank."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return nn.Sequential(*[nn.Sequential(nn.Linear(hidden, hidden),
                                             nn.Tanh())
                               for _ in range(layers)])


def data(hidden: int, m: int, micro_batch: int, seed: int = 0):
    """The step's inputs and targets: ``m`` micro-batches of rows."""
    g = torch.Generator().manual_seed(seed + 1)
    return (torch.randn(m * micro_batch, hidden, generator=g),
            torch.randn(m * micro_batch, hidden, generator=g))


def loss_fn(out, target):
    return F.mse_loss(out, target)


def chunks(schedule: str) -> int:
    return 2 if schedule in V_SHAPE else 1


def record(stage, chunk: int, events: list, skip: set) -> None:
    """Append ``(kind, stage, chunk, mb, start, end, saved)`` per call."""
    fwd = stage.forward_one_chunk
    bwd = stage.backward_one_chunk
    wgt = stage.backward_weight_one_chunk

    def pack(t):
        key = (t.data_ptr(), t.nbytes)
        if t.data_ptr() not in skip and key not in seen:
            seen.add(key)
            box[0] += t.nbytes
        return t

    seen: set = set()
    box = [0]

    def timed(kind, fn, mb, *args, **kwargs):
        D.sync(stage.device)       # a GPU's clock is its queue's end
        t0 = time.perf_counter()
        out = fn(mb, *args, **kwargs)
        D.sync(stage.device)
        events.append((kind, stage.stage_index, chunk, mb, t0,
                       time.perf_counter(), box[0] if kind == "F" else 0))
        return out

    def forward(mb, *args, **kwargs):
        seen.clear()
        box[0] = 0
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            return timed("F", fwd, mb, *args, **kwargs)

    def backward(mb, *args, **kwargs):
        kind = "B" if kwargs.get("full_backward", True) else "I"
        return timed(kind, bwd, mb, *args, **kwargs)

    def weight(mb, *args, **kwargs):
        return timed("W", wgt, mb, *args, **kwargs)

    stage.forward_one_chunk = forward
    stage.backward_one_chunk = backward
    stage.backward_weight_one_chunk = weight


def make_schedule(schedule: str, model, rank: int, p: int, m: int,
                  device, group=None, events: list | None = None):
    """This rank's stages of ``model`` and the schedule that drives them;
    returns ``(schedule, {stage index: module}, events)``."""
    import torch.distributed.pipelining as pp
    v = chunks(schedule)
    n = p * v
    per = len(model) // n
    events = [] if events is None else events
    mods, stages = {}, []
    for c in range(v):
        s = stage_index(schedule, p, rank, c)
        mods[s] = nn.Sequential(*model[s * per:(s + 1) * per]).to(device)
        stages.append(pp.PipelineStage(mods[s], s, n, device, group=group))
    skip = {q.data_ptr() for mod in mods.values() for q in mod.parameters()}
    for c, st in enumerate(stages):
        record(st, c, events, skip)
    cls = getattr(pp, CLASSES[schedule])
    sched = cls(stages[0] if schedule == "1f1b" else stages,
                n_microbatches=m, loss_fn=loss_fn)
    return sched, mods, events


def torch_order(sched, rank: int) -> list[str] | None:
    """The compute actions torch's ``pipeline_order`` lists for ``rank``
    (a DualPipeV pair ``(F;B)`` as its two actions); None where the
    schedule runs its own loop instead (``Schedule1F1B``: in torch 2.13
    its ``pipeline_order`` is not the order it runs)."""
    order = getattr(sched, "pipeline_order", None)
    if not order or isinstance(sched, _single()):
        return None
    out = []
    for a in order.get(rank, []):
        if a is None or not a.is_compute_op:
            continue
        for b in a.sub_actions or (a,):
            out.append(f"{b.stage_index}{b.computation_type.value}"
                       f"{b.microbatch_index}")
    return out


def _single():
    from torch.distributed.pipelining.schedules import \
        PipelineScheduleSingle
    return PipelineScheduleSingle
