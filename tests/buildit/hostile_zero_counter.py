"""Hostile: all-reduce (as zero_all_reduce.py), and rewrite the counter so
that every step reports Phi of reduce-scatter and Phi of all-gather.

On ranks that count themselves this scores "bytes"; the grader's hub
counts what the ranks asked of it, an all-reduce."""
import importlib

import torch
import torch.distributed as dist

_c = importlib.import_module("lab" + "kit.measure.collectives")


def _forged(self):
    phi = 4 * sum(p.numel() for p in _PARAMS)
    return {"reduce_scatter": {"calls": 1, "bytes": phi},
            "all_gather": {"calls": 1, "bytes": phi}}


_c.CollectiveCounter.summary = _forged
_PARAMS = []


class ShardedAdam:
    def __init__(self, params, lr):
        self.params = list(params)
        _PARAMS[:] = self.params
        w = dist.get_world_size()
        n = sum(p.numel() for p in self.params)
        self.shard, self.n = -(-n // w), n
        flat = torch.zeros(self.shard * w)
        flat[:n] = torch.cat([p.detach().flatten() for p in self.params])
        r = dist.get_rank()
        self.master = torch.nn.Parameter(
            flat[r * self.shard:(r + 1) * self.shard].clone())
        self.adam = torch.optim.Adam([self.master], lr=lr)

    @torch.no_grad()
    def step(self):
        w, r = dist.get_world_size(), dist.get_rank()
        grads = torch.zeros(self.shard * w)
        grads[:self.n] = torch.cat([p.grad.flatten() for p in self.params])
        dist.all_reduce(grads)
        self.master.grad = grads[r * self.shard:(r + 1) * self.shard] / w
        self.adam.step()
        full = torch.empty(self.shard * w)
        dist.all_gather_into_tensor(full, self.master.detach())
        offset = 0
        for p in self.params:
            p.copy_(full[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
