"""PyTorch's own ZeRO-1: DDP + ``ZeroRedundancyOptimizer``, measured.

    torchrun --nproc-per-node 2 -m labkit.runs.zero --variants zero1 \
        --torch-zero1 --steps 3

``torch.distributed.optim.ZeroRedundancyOptimizer`` (torch/distributed/
optim/zero_redundancy_optimizer.py) wraps a plain optimizer and gives each
rank the Adam states of its share of the parameters only: ZeRO stage 1
(Rajbhandari et al. 2020, Sec. 5.1) for DDP. DDP still all-reduces every
gradient (2 Phi); after its local step each rank broadcasts the
parameters it owns. Unlike DeepSpeed's flat partition, the shares are
*whole parameters*, packed "sorted-greedy" (largest first, to the rank
with the fewest elements so far): the per-rank state is 8 bytes (fp32
Adam m and v) times the numel of the parameters that rank owns, which is
close to, not exactly, the ledger's 8 Psi / N.
"""
from __future__ import annotations

from contextlib import nullcontext

import torch

from labkit import device as D
from labkit import dist
from labkit.measure.collectives import CollectiveCounter
from labkit.nn.model import build, rank_batches
from labkit.training.train import LR, mean_over_ranks


def owned_numels(opt) -> list[int]:
    """Elements of the parameters each rank owns (the optimizer's partition)."""
    return [sum(p.numel() for group in groups for p in group["params"])
            for groups in opt._partition_parameters()]


def run_torch_zero1(config, ctx, a) -> dict:
    """Train with DDP + ZeroRedundancyOptimizer(Adam); the lesson's code."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    from labkit.measure.memory import model_state_bytes

    D.reset_peak(ctx.device)
    model = build(config, a.seed).to(ctx.device)
    model = DDP(model, device_ids=[ctx.local_rank] if ctx.is_cuda else None)
    opt = ZeroRedundancyOptimizer(model.parameters(),
                                  optimizer_class=torch.optim.Adam, lr=LR)
    losses, measured, counter = [], None, None
    batches = rank_batches(config, a.batch, ctx, a.steps, a.seed)
    for step, (x, y) in enumerate(batches):
        last = step == len(batches) - 1
        dist.sync(ctx)
        with CollectiveCounter() if last else nullcontext() as counter:
            opt.zero_grad(set_to_none=True)
            loss = model(x, y)
            loss.backward()           # DDP: all-reduce of every gradient
            opt.step()                # Adam on the owned share, broadcast
            dist.sync(ctx)
        if last:   # the local optimizer holds this rank's Adam states
            measured = model_state_bytes(model, opt.optim)
        losses.append(mean_over_ranks(loss))
    out = {"name": "torch_zero1", "engine": "torch_zero1", "losses": losses,
           "bytes_after_step": measured, "owned_numels": owned_numels(opt),
           "comm": counter.summary(), "comm_records": counter.records}
    out["peak"] = D.peak_bytes(ctx.device, measured["total"])
    del model, opt
    dist.release(ctx)
    return out
