"""This rank's pipeline stages of the course's GPT, and the schedule that
drives them (torch.distributed.pipelining).

    sched, params = make_pipeline("1f1b", model, ctx, p=2, v=1, m=4,
                                  group=None)
    loss = step(sched, ctx, x, y, p=2)     # the mean loss on the last rank

:func:`split` cuts the GPT of ``labkit.nn.model`` into ``p x v`` stages of
equal block counts; rank ``r`` runs stage ``r`` (GPipe, Huang et al. 2019;
1F1B, Narayanan et al. 2021, Sec. 2.2.1) or stages ``r, r + p, ...``
(interleaved 1F1B, Sec. 2.2.2), driven by torch's ``ScheduleGPipe``,
``Schedule1F1B`` or ``ScheduleInterleaved1F1B``. :func:`instrument`
records when each forward and backward chunk runs, for the bubble.
Used by :mod:`labkit.runs.pipeline_parallel` (the torchrun entry point,
which re-exports these names) and by lab 6.
"""
from __future__ import annotations

import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from labkit import device as D


class Stage(nn.Module):
    """A slice of the GPT: [embedding] + blocks + [final norm and head]."""

    def __init__(self, embed, blocks, head):
        super().__init__()
        self.embed = embed
        self.blocks = nn.ModuleList(blocks)
        self.head = head

    def forward(self, x):
        if self.embed is not None:
            x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x) if self.head is not None else x


def split(model, n_stages: int) -> list[Stage]:
    """Cut the model into ``n_stages`` stages of equal block counts."""
    L = len(model.blocks)
    per = L // n_stages
    return [Stage(model.embed if s == 0 else None,
                  list(model.blocks[s * per:(s + 1) * per]),
                  model.head if s == n_stages - 1 else None)
            for s in range(n_stages)]


def loss_fn(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def instrument(stage, chunk: int, events: list) -> None:
    """Record (kind, stage, chunk, micro-batch, start, end) of each chunk."""
    fwd, bwd = stage.forward_one_chunk, stage.backward_one_chunk

    def timed(kind, fn):
        def run(mb, *args, **kwargs):
            D.sync(stage.device)
            t0 = time.perf_counter()
            out = fn(mb, *args, **kwargs)
            D.sync(stage.device)
            events.append((kind, stage.stage_index, chunk, mb, t0,
                           time.perf_counter()))
            return out
        return run

    stage.forward_one_chunk = timed("F", fwd)
    stage.backward_one_chunk = timed("B", bwd)


def make_pipeline(schedule: str, model, ctx, p: int, v: int, m: int,
                  group, events: list | None = None):
    """This rank's stages of ``model`` and the schedule that drives them."""
    from torch.distributed.pipelining import (PipelineStage, Schedule1F1B,
                                              ScheduleGPipe,
                                              ScheduleInterleaved1F1B)
    n_stages = p * v
    stages_mod = split(model, n_stages)
    mine = list(range(ctx.rank, n_stages, p))          # r, r + p, ...
    stages = [PipelineStage(stages_mod[s], s, n_stages, ctx.device,
                            group=group) for s in mine]
    if events is not None:
        for chunk, st in enumerate(stages):
            instrument(st, chunk, events)
    if schedule == "interleaved":
        sched = ScheduleInterleaved1F1B(stages, n_microbatches=m,
                                        loss_fn=loss_fn)
    else:
        cls = ScheduleGPipe if schedule == "gpipe" else Schedule1F1B
        sched = cls(stages[0], n_microbatches=m, loss_fn=loss_fn)
    params = [q for s in mine for q in stages_mod[s].parameters()]
    return sched, params


def step(sched, ctx, x, y, p: int):
    """One pipeline step; returns the mean loss on the last rank, else None."""
    losses = [] if ctx.rank == p - 1 else None
    args = (x,) if ctx.rank == 0 else ()
    sched.step(*args, target=y if ctx.rank == p - 1 else None,
               losses=losses)
    if losses is None:
        return None
    return torch.stack([t.detach().float() for t in losses]).mean().item()
