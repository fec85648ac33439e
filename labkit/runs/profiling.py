"""A deliberately slow data-parallel run, profiled, and its fixes.

    torchrun --nproc-per-node 2 -m labkit.runs.profiling \\
        --configs slow,fix_data,fix_buckets,fix_sync --out /tmp/prof

The tiny GPT (:mod:`labkit.nn.model`) trains with DDP under ``torch.profiler``
(:mod:`labkit.measure.trace.capture`); every configuration writes its traces to
``OUT/<config>/rank-<r>.json.gz``, for ``python -m labkit profile``. The
slow baseline carries three causes, each a classic:

1. data: a Dataset whose ``__getitem__`` sleeps ``--delay-ms`` per sample
   (a slow decoder, a remote file), read with ``num_workers=0``, so the
   training process itself waits ``batch * delay`` every step;
2. communication: DDP with ``bucket_cap_mb`` so small that every gradient
   tensor gets its own all-reduce (one latency per tensor);
3. a sync point: every step all-reduces the loss and calls ``.item()`` to
   log it, which stalls the rank until its peers (and, on a GPU, the whole
   queue of kernels) have caught up.

Configurations (``--configs``, run in this order in one launch):

* ``slow``: all three causes;
* ``fix_data``: ``num_workers=--workers``, ``prefetch_factor=2``,
  ``persistent_workers`` (and ``pin_memory`` on a GPU);
* ``fix_buckets``: ``bucket_cap_mb=25`` (DDP's default size);
* ``fix_sync``: losses kept on the device, read once at the end;
  each ``fix_*`` adds its fix to those named before it in ``--configs``;
* ``w<N>`` / ``w<N>p<P>``: all three fixes, with ``num_workers=N`` and
  ``prefetch_factor=P`` (default 2): the DataLoader sweep.

On nccl (one GPU per rank) it runs on ``ctx.device``, records CUDA
activity, and with ``--bf16`` runs forward and loss under bf16 autocast.
"""
from __future__ import annotations

import argparse
import re
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.distributed as tdist

from labkit import dist
from labkit.nn import model as gpt
from labkit.measure.trace.capture import capture, phase
from labkit.training.train import make_optimizer, mean_over_ranks
from labkit.training.wrap import autocast, wrap

TINY_BUCKET_MB = 1e-6   # below any tensor's size: one bucket per tensor
DEFAULT_BUCKET_MB = 25.0
SWEEP = re.compile(r"^w(\d+)(?:p(\d+))?$")


@dataclass(frozen=True)
class RunConfig:
    name: str
    num_workers: int = 0
    prefetch_factor: int | None = None
    bucket_cap_mb: float = TINY_BUCKET_MB
    sync_every_step: bool = True


FIXES = ("data", "buckets", "sync")


def _fix(rc: RunConfig, what: str, workers: int) -> RunConfig:
    if what == "data":
        return replace(rc, num_workers=workers, prefetch_factor=2)
    if what == "buckets":
        return replace(rc, bucket_cap_mb=DEFAULT_BUCKET_MB)
    return replace(rc, sync_every_step=False)


def configs(names: list[str], workers: int) -> list[RunConfig]:
    """The named configurations, in order (see the module doc).

    ``fix_<cause>`` applies one fix on top of the fixes named before it,
    so ``slow,fix_buckets,fix_data,fix_sync`` fixes in that order.
    """
    if workers < 1:
        raise ValueError(f"the data fix needs workers >= 1, got {workers}")
    state = RunConfig("slow")
    fixed = state
    for f in FIXES:
        fixed = _fix(fixed, f, workers)
    out = []
    for n in names:
        m = SWEEP.match(n)
        if n == "slow":
            out.append(RunConfig("slow"))
        elif n.startswith("fix_") and n[4:] in FIXES:
            state = replace(_fix(state, n[4:], workers), name=n)
            out.append(state)
        elif m:
            w = int(m.group(1))
            p = int(m.group(2)) if m.group(2) else 2
            if w == 0 and m.group(2):
                raise ValueError(f"{n}: prefetch_factor needs num_workers "
                                 "> 0")
            if w > 0 and p < 1:
                raise ValueError(f"{n}: prefetch_factor must be >= 1")
            out.append(replace(fixed, name=n, num_workers=w,
                               prefetch_factor=p if w else None))
        else:
            raise ValueError(
                f"unknown configuration {n!r}: use slow, "
                f"{', '.join('fix_' + f for f in FIXES)} or w<N>[p<P>]")
    return out


class SlowDataset(torch.utils.data.Dataset):
    """Sample ``i`` of the tiny GPT's synthetic language, ``delay_s`` late."""

    def __init__(self, config: gpt.GPTConfig, size: int, delay_s: float,
                 seed: int = 0):
        self.config, self.size, self.delay_s, self.seed = (
            config, size, delay_s, seed)

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        time.sleep(self.delay_s)     # the slow part: a decoder, a disk
        x, y = gpt.batch(self.config, 1, step=i, seed=self.seed)
        return x[0], y[0]


def loader(ds, rc: RunConfig, batch: int, ctx):
    sampler = torch.utils.data.distributed.DistributedSampler(
        ds, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=False)
    kw = {}
    if rc.num_workers:
        kw = {"prefetch_factor": rc.prefetch_factor,
              "persistent_workers": True, "pin_memory": ctx.is_cuda}
    return torch.utils.data.DataLoader(
        ds, batch_size=batch, sampler=sampler, num_workers=rc.num_workers,
        drop_last=True, **kw)


def train(rc: RunConfig, a, ctx, out: Path) -> dict:
    """One configuration: build, train under the profiler, report."""
    c = gpt.config_from_args(a)
    m = gpt.build(c, seed=0)
    param_bytes = [p.numel() * p.element_size() for p in m.parameters()]
    model = wrap(m, "ddp", ctx, bucket_cap_mb=rc.bucket_cap_mb)
    opt = make_optimizer(model)
    steps = a.wait + a.warmup + a.active
    ds = SlowDataset(c, steps * a.batch * ctx.world_size, a.delay_ms / 1e3)
    dl = loader(ds, rc, a.batch, ctx)
    losses, kept, step_s = [], [], []
    tdist.barrier()
    batches = iter(dl)                       # workers start here
    with capture(out / rc.name, rank=ctx.rank, wait=a.wait,
                 warmup=a.warmup, active=a.active, cuda=ctx.is_cuda) as prof:
        for step in range(prof.steps):
            t0 = time.perf_counter()
            with phase("data"):
                x, y = next(batches)
                x = x.to(ctx.device, non_blocking=True)
                y = y.to(ctx.device, non_blocking=True)
            with phase("forward"), autocast(ctx, "ddp", a.bf16):
                loss = model(x, y)
            with phase("backward"):
                loss.backward()
            with phase("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
            if rc.sync_every_step:           # "log the global loss"
                losses.append(mean_over_ranks(loss))   # all-reduce, .item()
            else:                            # keep it on the device
                kept.append(loss.detach())
            prof.step()
            step_s.append(time.perf_counter() - t0)
    if kept:                                 # one sync, at the end
        g = torch.stack(kept).float()
        tdist.all_reduce(g)
        losses = (g / ctx.world_size).tolist()
    del batches, dl                          # stop the workers
    return {**asdict(rc), "trace_dir": str(out / rc.name),
            "losses": losses, "step_s": step_s,
            "param_bytes": param_bytes, "batch": a.batch,
            "delay_ms": a.delay_ms, "wait": a.wait, "warmup": a.warmup,
            "active": a.active,
            "predicted_data_ms": a.batch * a.delay_ms}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--configs", default="slow,fix_data,fix_buckets,fix_sync")
    p.add_argument("--out", required=True, help="folder for the traces")
    p.add_argument("--workers", type=int, default=2,
                   help="num_workers of the fix_data step")
    p.add_argument("--delay-ms", type=float, default=2.0,
                   help="sleep per sample in the dataset")
    p.add_argument("--batch", type=int, default=8, help="per rank")
    p.add_argument("--wait", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--active", type=int, default=3)
    gpt.add_shape_arguments(p)
    p.add_argument("--bf16", action="store_true")
    a = p.parse_args(argv)
    if a.delay_ms < 0 or a.batch < 1 or a.workers < 0:
        raise ValueError("need --delay-ms >= 0, --batch >= 1, "
                         "--workers >= 0")
    todo = configs([n for n in a.configs.split(",") if n], a.workers)
    ctx = dist.init()
    out = Path(a.out)
    results = {rc.name: train(rc, a, ctx, out) for rc in todo}
    dist.save(ctx, {"configs": results, "order": [rc.name for rc in todo]})
    dist.close()


if __name__ == "__main__":
    main()
