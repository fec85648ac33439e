"""Build it, lab 6: the 1F1B schedule on p real stages.

The student writes ``one_f_one_b(stage)``, run on every rank: it calls
``stage.forward(i)`` and ``stage.backward(i)`` for the micro-batches
``i = 0 .. stage.micro_batches - 1`` in the order 1F1B runs them on stage
``stage.rank`` of ``stage.stages`` (PipeDream-Flush, Narayanan et al.,
SC 2021, Fig. 4 top). The harness's :class:`Stage` does the work: it
receives the activation from the stage before (or takes the micro-batch),
runs its layer, sends the output on (point-to-point, ``isend``), and in
backward receives the gradient from the stage after (or starts from the
loss) and sends the input gradient back. Each message carries its sender's
*slot clock*: a forward or a backward takes one slot and starts when both
the stage and its input are ready, so the slots a stage waits are its
bubble, measured, not assumed.

Checks (plain data from every rank): ``grads``: each stage's gradients
(plain lists) equal the unsplit model's on the whole batch, run by the
checker (``reference``); ``order``: each stage's forwards and backwards are the
textbook table (``labkit.predict.pipeline_parallel.rank_order``);
``bubble``: idle slots / all slots = (p-1)/(m+p-1)
(``idle_fraction("1f1b", p, m)``; chapter 6's (p-1)/m is the same bubble
over the ideal time instead of the step); ``in_flight``: the most
micro-batches whose activations a stage holds at once (forward run,
backward not yet), counted by the :class:`Stage` itself, is at most
min(p - r, m) on stage r. With equal forward and backward slots GPipe's
order has the same bubble as 1F1B; what 1F1B buys is this: GPipe's first
stage holds all m micro-batches (Narayanan et al., SC 2021, sec. 2.2).

Under grading the order, the slots and the micro-batches in flight are
not the ranks' word: every message goes through the grader's hub, and
``from_hub`` reads them from its record (``labkit.buildit.pipeline_hub``).
"""
from __future__ import annotations

import functools
import json
import math

from labkit.buildit.tensors import cache_key, flat, gap

CONFIG = {"micro_batches": 6, "hidden": 8, "batch": 2, "seed": 0,
          "rank_timeout_s": 30}
# the hidden tests' (big enough that what a step must send outweighs the
# launch's own traffic: labkit.buildit.grade's wire check)
HIDDEN = {"micro_batches": 5, "hidden": 64, "batch": 64, "seed": 1}
TOL = 1e-5


class Stage:
    """One pipeline stage on this rank: what ``one_f_one_b`` drives."""

    def __init__(self, ctx, layer, xs, ys, cfg):
        self.rank, self.stages = ctx.rank, ctx.world_size
        self.micro_batches = cfg["micro_batches"]
        self.layer, self.xs, self.ys = layer, xs, ys
        self.clock, self.events, self.sends = 0.0, [], []
        self.inputs, self.outputs = {}, {}
        self.peak_in_flight = 0     # micro-batches held at once

    def _send(self, t, i, to):
        import torch
        import torch.distributed as tdist
        msg = torch.cat([t.detach().flatten(),
                         torch.tensor([float(i), self.clock])])
        self.sends.append(tdist.isend(msg, to))

    def _recv(self, i, frm, what):
        import torch
        import torch.distributed as tdist
        msg = torch.empty(self.xs[0].numel() + 2)
        tdist.recv(msg, frm)
        got, at = int(msg[-2]), float(msg[-1])
        if got != i:
            raise RuntimeError(
                f"stage {self.rank} asked for the {what} of micro-batch {i} "
                f"but stage {frm} sent micro-batch {got} first: every stage "
                f"must take the micro-batches in the same order")
        return msg[:-2].view_as(self.xs[0]), at

    def _run(self, kind, i, ready_at):
        start = max(self.clock, ready_at)
        self.events.append([kind, i, start])
        self.clock = start + 1.0

    def forward(self, i: int) -> None:
        from torch import nn
        if not 0 <= i < self.micro_batches or i in self.inputs:
            raise RuntimeError(f"stage {self.rank}: forward({i}) again or "
                               f"out of range (m = {self.micro_batches})")
        x, at = (self.xs[i], 0.0) if self.rank == 0 else \
            self._recv(i, self.rank - 1, "activation")
        x = x.clone().requires_grad_(self.rank > 0)
        self._run("F", i, at)
        y = self.layer(x)
        if self.rank == self.stages - 1:
            y = nn.functional.mse_loss(y, self.ys[i]) / self.micro_batches
        else:
            self._send(y, i, self.rank + 1)
        self.inputs[i], self.outputs[i] = x, y
        self.peak_in_flight = max(self.peak_in_flight, len(self.outputs))

    def backward(self, i: int) -> None:
        if i not in self.outputs:
            raise RuntimeError(
                f"stage {self.rank}: backward({i}) before forward({i}), or "
                "twice")
        if self.rank == self.stages - 1:
            grad, at = None, 0.0
        else:
            grad, at = self._recv(i, self.rank + 1, "gradient")
        self._run("B", i, at)
        self.outputs.pop(i).backward(grad)
        x = self.inputs.pop(i)
        if self.rank > 0:
            self._send(x.grad, i, self.rank - 1)


def _model(cfg, p):
    import torch
    from torch import nn
    h, m = cfg["hidden"], cfg["micro_batches"]
    torch.manual_seed(cfg["seed"])
    layers = [nn.Sequential(nn.Linear(h, h), nn.Tanh()) for _ in range(p)]
    xs = torch.randn(m, cfg["batch"], h)
    ys = torch.randn(m, cfg["batch"], h)
    return layers, xs, ys


@functools.lru_cache(maxsize=4)
def _reference(key) -> list:
    from torch import nn
    cfg, p = json.loads(key[0]), key[1]
    layers, xs, ys = _model(cfg, p)
    m = cfg["micro_batches"]
    ref = nn.Sequential(*layers)
    sum(nn.functional.mse_loss(ref(x), y) / m for x, y in zip(xs, ys)
        ).backward()
    return [[q.grad.detach().clone() for q in lay.parameters()]
            for lay in layers]


def reference(cfg, p) -> list:
    """Per stage, the unsplit model's gradients of its layer (the
    checker's own run)."""
    import torch
    with torch.random.fork_rng():      # the caller's RNG stays as it was
        return _reference(cache_key(cfg, p))


def rank_run(ctx, mod, cfg) -> dict:
    import torch.distributed as tdist

    from labkit.measure.collectives import CollectiveCounter

    layers, xs, ys = _model(cfg, ctx.world_size)
    layer = layers[ctx.rank]
    stage = Stage(ctx, layer, xs, ys, cfg)
    with CollectiveCounter():   # the schedule's window (``from_hub``)
        mod.one_f_one_b(stage)
        for work in stage.sends:
            work.wait()
        tdist.barrier()
    return {"events": stage.events, "end": stage.clock,
            "grads": [flat(q.grad) for q in layer.parameters()],
            "no_backward": sorted(stage.outputs),
            "in_flight": stage.peak_in_flight}


def from_hub(result, windows):
    """The ranks' ``events``, ``end``, ``in_flight`` and ``no_backward``
    from the grader's record of their messages, with the grader's slots
    (``labkit.buildit.pipeline_hub``): the ranks' own record is
    dropped."""
    from labkit.buildit.pipeline_hub import schedule
    return {**result, "ranks": [
        {**r, **s} for r, s in zip(result["ranks"],
                                   schedule(windows, len(windows)))]}


def check_grads(result):
    want = reference(result["config"], len(result["ranks"]))
    worst = max(max(gap(g, t) for g, t in zip(r["grads"], want[k]))
                if len(r["grads"]) == len(want[k]) else math.inf
                for k, r in enumerate(result["ranks"]))
    missing = {i for r in result["ranks"] for i in r["no_backward"]}
    return worst < TOL, worst, f"< {TOL:g}", (
        (f"micro-batches {sorted(missing)} never ran backward on some "
         "stage; " if missing else "")
        + f"the stages' gradients differ from the unsplit model's by up to "
        f"{worst:.3g}: every micro-batch needs one forward and one "
        "backward on every stage")


def check_order(result):
    from labkit.predict.pipeline_parallel import rank_order
    p, m = len(result["ranks"]), result["config"]["micro_batches"]
    table = rank_order("1f1b", p, m)
    for r, rank in enumerate(result["ranks"]):
        got = [f"{k}{i}" for k, i, _ in rank["events"]]
        want = [f"{k}{i}" for k, i, _ in table[r]]
        if got != want:
            return False, {r: " ".join(got)}, {r: " ".join(want)}, (
                f"stage {r} of {p} ran {' '.join(got)}; 1F1B runs "
                f"{' '.join(want)}: {min(p - r - 1, m)} warm-up forwards "
                f"(p - r - 1), then one forward and one backward in turn, "
                f"then the remaining backwards, so that a stage never holds "
                f"more than p - r micro-batches of activations")
    return True, "the textbook table", "the textbook table", ""


def check_bubble(result):
    from labkit.predict.pipeline_parallel import idle_fraction
    p, m = len(result["ranks"]), result["config"]["micro_batches"]
    total = max(r["end"] for r in result["ranks"])
    busy = 2 * m
    if total < busy:
        return False, None, idle_fraction("1f1b", p, m), (
            "not every micro-batch ran its forward and its backward")
    measured = (total - busy) / total
    want = idle_fraction("1f1b", p, m)
    return abs(measured - want) < 1e-9, measured, want, (
        f"your schedule takes {total:g} slots where each stage is busy "
        f"{busy}: a bubble of {measured:.3f}, not (p-1)/(m+p-1) = "
        f"{want:.3f}. Start the next forward before the backward of the "
        "last one comes back, so that the stages work at the same time")



def check_in_flight(result):
    p, m = len(result["ranks"]), result["config"]["micro_batches"]
    got = [r["in_flight"] for r in result["ranks"]]
    want = [min(p - r, m) for r in range(p)]
    bad = [r for r in range(p) if type(got[r]) is not int
           or not 0 < got[r] <= want[r]]
    return not bad, got, f"at most {want}", (
        f"stage {bad[0]} held the activations of {got[bad[0]]} "
        f"micro-batches at once, more than 1F1B's p - r = {want[bad[0]]}: "
        "GPipe's order (every forward, then every backward) has the same "
        "bubble but holds all m; 1F1B starts a micro-batch's backward as "
        "soon as the last stage can, so that a stage never holds more "
        "than p - r" if bad else "")


def min_wire(cfg, w: int) -> int:
    """Half the bytes of the activations and gradients that cross the
    p - 1 stage boundaries, once each way per micro-batch."""
    msg = 4 * (cfg["batch"] * cfg["hidden"] + 2)
    return (w - 1) * cfg["micro_batches"] * 2 * msg // 2


def expected(cfg, world_size: int) -> dict:
    from labkit.predict.pipeline_parallel import idle_fraction, rank_order
    p, m = world_size, cfg["micro_batches"]
    table = rank_order("1f1b", p, m)
    return {"grads": f"max |grad - unsplit grad| < {TOL:g}",
            "order": "; ".join(f"stage {r}: " + " ".join(
                f"{k}{i}" for k, i, _ in ops) for r, ops in table.items()),
            "bubble": f"(p-1)/(m+p-1) = {idle_fraction('1f1b', p, m):.3f} "
                      f"of {2 * (m + p - 1)} slots",
            "in_flight": "micro-batches held at once per stage: at most "
                         f"{[min(p - r, m) for r in range(p)]} (GPipe: "
                         f"{m} on every stage)"}


CHECKS = [("grads", 1, check_grads), ("order", 1, check_order),
          ("bubble", 1, check_bubble), ("in_flight", 1, check_in_flight)]
