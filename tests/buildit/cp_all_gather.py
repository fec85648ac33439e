"""K and V all-gathered (an autograd all-gather), then plain attention:
right numbers, but not a ring: collectives instead of point-to-point
messages, nothing overlapped (bytes, overlap)."""
import math

import torch
import torch.distributed as dist
from torch.distributed._functional_collectives import \
    all_gather_tensor_autograd


def gather(t):
    g = all_gather_tensor_autograd(t.transpose(0, 2).contiguous(), 0,
                                   dist.group.WORLD)
    g = g.wait() if hasattr(g, "wait") else g
    return g.transpose(0, 2)


def ring_attention(q, k, v):
    k, v = gather(k), gather(v)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(s, dim=-1) @ v
