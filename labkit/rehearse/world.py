"""One rank of a launch, rehearsed in this process on fake tensors.

    with rehearsed_rank(world_size=2, rank=1) as r:
        runpy-like: r.main(module, argv)    # the run module's own main()
    r.record        # what dist.save was given ("not rehearsed" values NaN)
    r.rules         # the NCCL stand-in (labkit.rehearse.nccl)
    r.peak          # the most bytes alive on the rank at once

The rank is :func:`labkit.dryrun.fake.fake_world` with one change: the
fake process group also serves the ``meta`` device, and ``meta`` stands
for the rank's GPU -- ``dist.init()`` returns a context whose device is
``meta`` and whose backend is ``nccl``. Fake tensors on ``meta`` carry
shapes, dtypes and their device, and FakeTensorMode refuses an operator
on tensors of two devices, as CUDA does ("Expected all tensors to be on
the same device"); a tensor left on the CPU is therefore seen, by the
operator that mixes it in or by the collective that carries it
(:class:`labkit.rehearse.nccl.NcclRules`).

Values fake tensors cannot produce -- ``.item()`` of a loss, a difference,
a norm -- come back as NaN and are counted (``r.not_rehearsed``); the
report shows them as "not rehearsed", never as numbers. ``dist.save``
keeps the record here; ``dist.close`` and ``dist.sync`` do nothing.
"""
from __future__ import annotations

import contextlib
import math

import torch

from labkit import dist
from labkit.dryrun.account import Tracker
from labkit.dryrun.fake import fake_world
from labkit.rehearse.nccl import NcclRules, watch_groups

DEVICE = torch.device("meta")   # the rank's GPU, in a rehearsal


class Rank:
    def __init__(self, world_size: int, rank: int):
        self.world_size, self.rank = world_size, rank
        self.rules = NcclRules(rank, DEVICE)
        self.record: dict | None = None
        self.not_rehearsed = 0
        self.peak = 0
        self.error: str | None = None

    def context(self) -> dist.Context:
        return dist.Context(rank=self.rank, world_size=self.world_size,
                            local_rank=self.rank % 8, backend="nccl",
                            device=DEVICE)

    def main(self, fn, argv) -> None:
        """Run ``fn(argv)`` (a run module's ``main``) as this rank;
        an exception is kept as this rank's one-line error."""
        tracker = Tracker()
        try:
            with tracker, self.rules, watch_groups(self.rules):
                fn(argv)
        except Exception as e:  # noqa: BLE001 - the rank's failure
            self.error = f"{type(e).__name__}: {str(e).splitlines()[0]}" \
                if str(e) else type(e).__name__
        self.peak = tracker.peak


@contextlib.contextmanager
def rehearsed_rank(world_size: int, rank: int):
    """Rank ``rank`` of ``world_size``, fake, its GPU the ``meta`` device."""
    from torch._subclasses.fake_tensor import FakeTensor
    r = Rank(world_size, rank)
    item = torch.Tensor.item

    def fake_item(self):
        if isinstance(self, FakeTensor):
            r.not_rehearsed += 1
            return math.nan
        return item(self)

    def save(ctx, record):
        r.record = {"rank": ctx.rank, "world_size": ctx.world_size,
                    "backend": ctx.backend, **record}
    saved = [(dist, n, getattr(dist, n)) for n in ("init", "save", "close",
                                                   "sync")]
    saved.append((torch.Tensor, "item", item))
    with fake_world(world_size, rank, backend="cpu:fake,meta:fake"):
        try:
            dist.init = lambda *a, **k: r.context()
            dist.save = save
            dist.close = lambda: None
            dist.sync = lambda ctx: None
            torch.Tensor.item = fake_item
            yield r
        finally:
            for obj, name, value in saved:
                setattr(obj, name, value)
