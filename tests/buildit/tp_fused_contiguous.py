"""Wrong for a fused QKV weight (chapter 5's silent bug): the right layers,
but ``parts`` is ignored, so the 3h rows of a fused [q; k; v] weight are cut
into N contiguous blocks.

The MLP pair is right; in the attention block rank 0 holds all of q and
half of k: its "keys" are queries, its "values" keys. No error is raised."""
import torch
import torch.distributed as dist
from torch import nn


class F(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class G(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class ColumnParallelLinear(nn.Module):
    def __init__(self, full, rank, world_size, parts=1):
        super().__init__()
        w = full.weight.detach().chunk(world_size, 0)[rank]
        b = full.bias.detach().chunk(world_size, 0)[rank]
        self.weight = nn.Parameter(w.clone())
        self.bias = nn.Parameter(b.clone())

    def forward(self, x):
        return nn.functional.linear(F.apply(x), self.weight, self.bias)


class RowParallelLinear(nn.Module):
    def __init__(self, full, rank, world_size):
        super().__init__()
        w = full.weight.detach().chunk(world_size, 1)[rank]
        self.weight = nn.Parameter(w.clone())
        self.bias = nn.Parameter(full.bias.detach().clone())

    def forward(self, x):
        return G.apply(nn.functional.linear(x, self.weight)) + self.bias
