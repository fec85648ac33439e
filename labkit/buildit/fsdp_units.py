"""The units of lab 3's FSDP build-it, and the probe that watches them.

    probe = Probe()
    us = units(cfg, probe)     # Linear (+ tanh) modules, seeded
    probe.track(*tensors)      # storages that hold gathered parameters
    probe.sample("forward 2")  # [where, bytes of them still alive]
    numels(sizes), padded(sizes, w), bound(sizes, w)   # their sizes
    Probe(mark=True)           # ... each sample a point for the grader

Each unit computes through :class:`Layer`, an autograd function of the
harness's own, so the probe sees the very weight a unit multiplies by, in
forward and again in backward (whatever the student's code did to get it
there: swapped ``p.data``, resized storages, saved-tensor hooks). The
probe holds weak references only: it keeps nothing alive, and a storage
resized to 0 counts 0 (how FSDP frees).
"""
from __future__ import annotations

import math
import weakref


def numels(sizes: list[int]) -> list[int]:
    """Parameters of each unit (weight and bias of one Linear)."""
    return [(a + 1) * b for a, b in zip(sizes[:-1], sizes[1:])]


def padded(sizes: list[int], w: int) -> list[int]:
    """... each padded to a multiple of the world size."""
    return [math.ceil(n / w) * w for n in numels(sizes)]


def bound(sizes: list[int], w: int) -> int:
    """Bytes of one unit plus its prefetch: the largest neighbours."""
    p = padded(sizes, w)
    return 4 * max(a + b for a, b in zip(p, p[1:] + [0]))


class Probe:
    """The gathered parameters alive, from the storages the units compute
    with (weak references: the probe keeps nothing alive)."""

    def __init__(self, mark: bool = False):
        # mark: each sample is also a point for the grader's hub
        # (``labkit.buildit.fsdp_peak``; nothing without one)
        self.seen, self.samples, self.mark = [], [], mark

    def track(self, *ts):
        import torch
        for t in ts:
            if not isinstance(t, torch.Tensor):
                continue
            s = t.untyped_storage()
            self.seen = [r for r in self.seen if r() is not None]
            if not any(r() is s for r in self.seen):
                self.seen.append(weakref.ref(s))

    def sample(self, where):
        alive = {id(s): s.nbytes() for s in (r() for r in self.seen)
                 if s is not None}
        self.samples.append([where, sum(alive.values())])
        if self.mark:
            from labkit.buildit import points
            points.mark(where)


def _unit_class():
    import torch
    from torch import nn

    class Layer(torch.autograd.Function):
        """x W^T + b (then tanh); the probe sees the W it computes with,
        in forward and again in backward."""

        @staticmethod
        def forward(ctx, x, w, b, act, probe, name):
            probe.track(w, b)
            probe.sample(f"forward {name}")
            y = x @ w.t() + b
            if act:
                y = torch.tanh(y)
            ctx.save_for_backward(x, w, y)
            ctx.act, ctx.probe, ctx.name = act, probe, name
            return y

        @staticmethod
        def backward(ctx, dy):
            x, w, y = ctx.saved_tensors
            ctx.probe.track(w)
            ctx.probe.sample(f"backward {ctx.name}")
            if ctx.act:
                dy = dy * (1 - y * y)
            return dy @ w, dy.t() @ x, dy.sum(0), None, None, None

    class Unit(nn.Module):
        def __init__(self, a, b, act, probe, name):
            super().__init__()
            lin = nn.Linear(a, b)
            self.weight, self.bias = lin.weight, lin.bias
            self.act, self.probe, self.name = act, probe, name

        def forward(self, x):
            return Layer.apply(x, self.weight, self.bias, self.act,
                               self.probe, self.name)

    return Unit


def units(cfg, probe=None):
    """The model's units, seeded (the same full values on every rank)."""
    import torch
    torch.manual_seed(cfg["seed"])
    probe = probe or Probe()
    unit, s = _unit_class(), cfg["sizes"]
    return [unit(a, b, i < len(s) - 2, probe, str(i))
            for i, (a, b) in enumerate(zip(s[:-1], s[1:]))]
