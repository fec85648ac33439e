"""Hostile: full Adam on every rank (as zero_full_adam.py), and rewrite the
harness's own measure of what the optimizer keeps (``kept_bytes``) so that
it reports a shard's: Adam's moments for 1/N of the parameters.

On ranks that measure themselves this scores "state"; under grading the
hub reads each rank's memory from outside (the probe), which holds the
full moments: 0 on "state"."""
import importlib

import torch
import torch.distributed as dist

_kept = importlib.import_module("lab" + "kit.buildit.kept")
_PARAMS = []


def _forged(roots, skip=(), home=None, limit=200_000):
    return 10 * sum(p.numel() for p in _PARAMS) // dist.get_world_size()


_kept.kept_bytes = _forged


class ShardedAdam:
    def __init__(self, params, lr):
        self.params = list(params)
        if not _PARAMS:
            _PARAMS[:] = self.params          # the checked model's
        self.adam = torch.optim.Adam(self.params, lr=lr)

    @torch.no_grad()
    def step(self):
        w = dist.get_world_size()
        n = sum(p.numel() for p in self.params)
        shard = -(-n // w)
        grads = torch.zeros(shard * w)
        grads[:n] = torch.cat([p.grad.flatten() for p in self.params])
        mine = torch.empty(shard)
        dist.reduce_scatter_tensor(mine, grads)
        full = torch.empty(shard * w)
        dist.all_gather_into_tensor(full, mine / w)
        offset = 0
        for p in self.params:
            p.grad.copy_(full[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        self.adam.step()
