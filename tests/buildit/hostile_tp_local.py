"""Hostile: no g. Each rank keeps its blocks, but its row-parallel layer
adds the other ranks' partial outputs itself, computed from the whole pair
it draws from the configuration on its command line and the harness's own
``pair_layers`` (the numbers every rank's blocks are cut from), and
all-reduces zeros.

On ranks that draw their own layers that is the right output. Under
grading the hub deals each rank only its own blocks of layers drawn from a
seed no rank holds (buildit/tensor_parallel_blocks.py): the rank's own
draw is other numbers, 0 on "output"."""
import importlib
import json
import sys

import torch
import torch.distributed as dist
from torch import nn

# (past the grader's check for the course's package in the source)
blocks = importlib.import_module("lab" + "kit.buildit.tensor_parallel_blocks")
SEEN = {}


class ColumnParallelLinear(nn.Module):
    def __init__(self, full, rank, world_size, parts=1):
        super().__init__()

        def mine(t):
            return torch.cat([c.chunk(world_size, 0)[rank]
                              for c in t.detach().chunk(parts, 0)]).clone()
        self.weight = nn.Parameter(mine(full.weight))
        self.bias = nn.Parameter(mine(full.bias))

    def forward(self, x):
        SEEN["x"] = x.detach()
        return nn.functional.linear(x, self.weight, self.bias)


class RowParallelLinear(nn.Module):
    def __init__(self, full, rank, world_size):
        super().__init__()
        self.rank, self.world = rank, world_size
        self.weight = nn.Parameter(
            full.weight.detach().chunk(world_size, 1)[rank].clone())
        self.bias = nn.Parameter(full.bias.detach().clone())

    def others(self, like):
        """The other ranks' partial outputs, from this rank's own draw."""
        cfg = json.loads(sys.argv[sys.argv.index("--config") + 1])
        if self.weight.shape[1] * self.world != 4 * cfg["hidden"]:
            return torch.zeros_like(like)          # not the pair
        full1, full2, _, _ = blocks.pair_layers(cfg)
        w1, b1 = full1.weight.chunk(self.world), full1.bias.chunk(self.world)
        w2 = full2.weight.chunk(self.world, 1)
        with torch.no_grad():
            return sum(nn.functional.gelu(SEEN["x"] @ w1[q].T + b1[q])
                       @ w2[q].T for q in range(self.world)
                       if q != self.rank)

    def forward(self, h):
        part = nn.functional.linear(h, self.weight)
        dist.all_reduce(torch.zeros_like(part))
        return part + self.others(part) + self.bias
