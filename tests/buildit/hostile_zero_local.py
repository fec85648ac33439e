"""Hostile: no reduce. Each rank draws the whole batch itself, from the
configuration on its command line and the harness's own ``data`` (the
numbers every rank's rows are cut from), computes the whole batch's
gradient alone and runs full Adam on it, and sends reduce-scatters and
all-gathers of ZeRO's sizes that carry nothing it reads.

On ranks that draw their own data those are the right parameters. Under
grading the hub deals each rank its rows from a seed no rank holds
(buildit/dealt.py): the rank's own draw is other numbers, 0 on
"params"."""
import importlib
import json
import sys

import torch
import torch.distributed as dist

# (past the grader's check for the course's package in the source)
zero = importlib.import_module("lab" + "kit.buildit.zero")
sharding = importlib.import_module("lab" + "kit.buildit.sharding")


class ShardedAdam:
    def __init__(self, params, lr):
        self.params = list(params)
        self.adam = torch.optim.Adam(self.params, lr=lr)
        self.cfg = json.loads(sys.argv[sys.argv.index("--config") + 1])
        self.whole = zero.data(self.cfg, dist.get_world_size())
        self.model = sharding.mlp(self.cfg)
        self.t = 0
        # the grader's memory probe steps a model of its own: plain Adam
        self.probe = [p.shape for p in self.model.parameters()] != \
            [p.shape for p in self.params]

    def step(self):
        w = dist.get_world_size()
        n = sum(p.numel() for p in self.params)
        shard = -(-n // w)
        if self.probe:
            return self.adam.step()
        x, y = (t[self.t] for t in self.whole)
        self.t += 1
        with torch.no_grad():
            for mine, p in zip(self.model.parameters(), self.params):
                mine.copy_(p)
        self.model.zero_grad(set_to_none=True)
        zero.loss(self.model, x, y).backward()
        for mine, p in zip(self.model.parameters(), self.params):
            p.grad = mine.grad.clone()
        dist.reduce_scatter_tensor(torch.empty(shard),
                                   torch.zeros(shard * w))
        dist.all_gather_into_tensor(torch.empty(shard * w),
                                    torch.zeros(shard))
        self.adam.step()
