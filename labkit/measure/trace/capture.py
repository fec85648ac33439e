"""Profile a training loop: one Chrome trace per rank, phases labelled.

    from labkit.measure.trace.capture import capture, phase
    with capture(out_dir, rank=ctx.rank, cuda=ctx.is_cuda) as prof:
        for step in range(prof.steps):          # wait + warmup + active
            with phase("data"):
                x, y = next(batches)
            with phase("forward"):
                loss = model(x, y)
            with phase("backward"):
                loss.backward()
            with phase("optimizer"):
                opt.step(); opt.zero_grad()
            prof.step()
    # -> out_dir/rank-<r>.json.gz;  python -m labkit profile out_dir

The schedule is torch.profiler's: ``wait`` steps run unprofiled (the
DataLoader and the allocator settle), ``warmup`` steps are recorded and
thrown away (the profiler's own start-up cost lands there), ``active`` steps
are kept. Kineto numbers the kept steps ``ProfilerStep#N`` in the trace.
On CPU only CPU activity is recorded (gloo's transfers appear on its own
threads); with ``cuda=True`` the CUDA kernels, copies and NCCL kernels too.
Open a trace in https://ui.perfetto.dev or chrome://tracing (both read the
``.gz`` as it is; Perfetto runs in the browser, the trace stays local).
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch
from torch.profiler import (ProfilerActivity, profile, record_function,
                            schedule)

PHASES = ("data", "forward", "backward", "optimizer")


def phase(name: str):
    """Label a region of the step; the breakdown reports its duration."""
    return record_function(name)


class Capture:
    """What ``capture`` yields: call ``step()`` once per iteration."""

    def __init__(self, prof, steps: int, path: Path):
        self.profiler, self.steps, self.path = prof, steps, path

    def step(self) -> None:
        self.profiler.step()


@contextmanager
def capture(out_dir: str | Path, rank: int = 0, *, wait: int = 1,
            warmup: int = 1, active: int = 3, cuda: bool | None = None,
            record_shapes: bool = False, with_stack: bool = False):
    """Run the body under ``torch.profiler`` with a wait/warmup/active
    schedule; write ``out_dir/rank-<rank>.json.gz`` when the active steps
    are done."""
    if wait < 0 or warmup < 0 or active < 1:
        raise ValueError(f"need wait >= 0, warmup >= 0, active >= 1; got "
                         f"wait={wait}, warmup={warmup}, active={active}")
    if cuda is None:
        cuda = torch.cuda.is_available()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"rank-{rank}.json.gz"
    activities = [ProfilerActivity.CPU] + (
        [ProfilerActivity.CUDA] if cuda else [])

    def ready(p):
        p.export_chrome_trace(str(path))   # .gz: torch compresses it

    prof = profile(activities=activities,
                   schedule=schedule(wait=wait, warmup=warmup,
                                     active=active, repeat=1),
                   on_trace_ready=ready, record_shapes=record_shapes,
                   with_stack=with_stack)
    with prof:
        yield Capture(prof, wait + warmup + active, path)
