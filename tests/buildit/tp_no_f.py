"""Wrong: f is missing (the input gradient is not summed over ranks).

Outputs and weight gradients are right; the gradient that flows to the
layer below holds only this rank's share."""
import torch
import torch.distributed as dist
from torch import nn


class F(torch.autograd.Function):
    """f: identity forward, all-reduce of the gradient backward."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class G(torch.autograd.Function):
    """g: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class ColumnParallelLinear(nn.Module):
    """This rank's block of the OUTPUT features of ``full``."""

    def __init__(self, full, rank, world_size):
        super().__init__()
        w = full.weight.detach().chunk(world_size, 0)[rank]
        b = full.bias.detach().chunk(world_size, 0)[rank]
        self.weight = nn.Parameter(w.clone())
        self.bias = nn.Parameter(b.clone())

    def forward(self, x):
        return nn.functional.linear(x, self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """This rank's block of the INPUT features of ``full``; whole bias."""

    def __init__(self, full, rank, world_size):
        super().__init__()
        w = full.weight.detach().chunk(world_size, 1)[rank]
        self.weight = nn.Parameter(w.clone())
        self.bias = nn.Parameter(full.bias.detach().clone())

    def forward(self, x):
        partial = nn.functional.linear(x, self.weight)
        return G.apply(partial) + self.bias
