"""The training step every lab shares, and its single-process reference.

    losses = reference_losses(config, steps=3, batch_size=8)   # one process
    # inside a rank:
    x, y = local_batch(*batch(config, 8, step), ctx.rank, ctx.world_size)
    loss = train_step(model, optimizer, x, y)                  # local loss
    global_loss = mean_over_ranks(loss)                        # = reference

Data parallelism averages gradients over ranks, and each rank's loss is the
mean over an equal slice of the same global batch, so the mean of the rank
losses is the loss a single process computes on the whole batch: that is the
reference every distributed lab compares against (to float round-off).
"""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as tdist

from labkit.nn.model import GPTConfig, batch, build

LR = 1e-3
# None: fused Adam exactly when every parameter is on CUDA. The dry run
# (labkit.dryrun), whose fake ranks stand for CUDA ones, sets it to True.
FUSED: bool | None = None


def make_optimizer(model: torch.nn.Module, lr: float = LR):
    """Adam (no weight decay: AdamW's update), the ledger's optimizer.

    On CUDA the fused kernel (one launch for every parameter, the same
    update and the same two moments); on CPU the plain per-parameter loop.
    """
    from torch.distributed.tensor import DTensor
    params = list(model.parameters())
    fused = bool(params) and (FUSED if FUSED is not None else
                              all(p.device.type == "cuda" for p in params))
    # the fused kernel refuses a mix of DTensors and plain tensors (a TP
    # plan without FSDP leaves the norms and embeddings plain): per
    # parameter there, as on the node
    fused = fused and len({isinstance(p, DTensor) for p in params}) == 1
    return torch.optim.Adam(params, lr=lr, **(
        {"fused": True} if fused else {"foreach": False}))


def setup(strategy: str, config: GPTConfig, ctx, bf16: bool = False,
          seed: int = 0, **wrap_kw):
    """Model, optimizer and autocast of a data-parallel strategy.

    What the runs of labs 1, 3 and 4 train (and the dry run executes):
    ``wrap(build(config, seed), strategy, ctx, bf16=bf16, **wrap_kw)``,
    :func:`make_optimizer`, :func:`labkit.training.wrap.autocast`.
    """
    from labkit.training.wrap import autocast, wrap
    model = wrap(build(config, seed), strategy, ctx, bf16=bf16, **wrap_kw)
    return model, make_optimizer(model), autocast(ctx, strategy, bf16)


def maybe_compile(model: torch.nn.Module, enabled: bool = False,
                  backend: str = "inductor"):
    """``torch.compile(model)`` when asked (the GPU benchmark), else model.

    ``backend="eager"`` traces with TorchDynamo without generating kernels:
    what the CPU tests run, so that the compiled path is exercised cheaply.
    """
    return torch.compile(model, backend=backend) if enabled else model


def train_step(model, optimizer, x, y, autocast=None) -> torch.Tensor:
    """Forward, backward, optimizer step; returns the (local) loss."""
    optimizer.zero_grad(set_to_none=True)
    with autocast or contextlib.nullcontext():
        loss = model(x, y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def mean_over_ranks(loss: torch.Tensor) -> float:
    """Average a scalar over all ranks (the global-batch loss)."""
    t = loss.detach().float().clone()
    if tdist.is_initialized():
        tdist.all_reduce(t)
        t /= tdist.get_world_size()
    return t.item()


def reference_losses(config: GPTConfig, steps: int, batch_size: int,
                     seed: int = 0, lr: float = LR) -> list[float]:
    """Losses of the same training run in one process, on the full batch."""
    model = build(config, seed)
    opt = make_optimizer(model, lr)
    losses = []
    for step in range(steps):
        x, y = batch(config, batch_size, step, seed)
        losses.append(train_step(model, opt, x, y).item())
    return losses


def timed_steps(step_fn, config: GPTConfig, ctx, batch_size: int,
                start: int, steps: int, seed: int) -> dict:
    """Median seconds of ``steps`` calls of ``step_fn(x, y)`` on the
    batches after the first ``start`` (one warm-up call first, not
    counted), synchronised across ranks around each."""
    import statistics
    import time

    from labkit import dist
    from labkit.nn.model import rank_batches
    times = []
    for i, (x, y) in enumerate(rank_batches(config, batch_size, ctx,
                                            steps + 1, seed, start=start)):
        dist.sync(ctx)
        t0 = time.perf_counter()
        step_fn(x, y)
        dist.sync(ctx)
        if i:
            times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    return {"step_s": step_s, "step_times": times,
            "tokens_per_s": batch_size * config.seq / step_s}

