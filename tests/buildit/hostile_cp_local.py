"""Hostile: no ring at all. Each rank draws the whole sequence itself,
from the configuration on its command line and the harness's own
``tensors`` (the numbers every rank's share is cut from), computes one
process's attention and its backward alone, and sends messages of the
ring's sizes that carry nothing it reads.

On ranks that draw their own data that is the right output and the right
gradients. Under grading the hub deals each rank its share from a seed no
rank holds (buildit/dealt.py): the rank's own draw is other numbers, 0 on
"output" and "grads"."""
import importlib
import json
import math
import sys

import torch
import torch.distributed as dist

# (past the grader's check for the course's package in the source)
cp = importlib.import_module("lab" + "kit.buildit.context_parallel")


def _hops(blocks, n):
    """``n`` ring hops of tensors shaped like ``blocks`` (read by no one)."""
    w, r = dist.get_world_size(), dist.get_rank()
    for _ in range(n):
        ops = []
        for t in blocks:
            ops += [dist.P2POp(dist.isend, t.contiguous(), (r + 1) % w),
                    dist.P2POp(dist.irecv, torch.empty_like(t),
                               (r - 1) % w)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()


def _whole():
    cfg = json.loads(sys.argv[sys.argv.index("--config") + 1])
    return cp.tensors(cfg, dist.get_world_size())


def _attention(q, k, v):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(s, dim=-1) @ v


class Alone(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        n, r = q.shape[2], dist.get_rank()
        mine = slice(r * n, (r + 1) * n)
        Q, K, V, D = (t.clone() for t in _whole())
        Q[..., mine, :], K[..., mine, :], V[..., mine, :] = q, k, v
        _hops([torch.stack([k, v])], dist.get_world_size() - 1)
        ctx.save_for_backward(Q, K, V, D)
        ctx.mine = mine
        return _attention(Q, K, V)[..., mine, :]

    @staticmethod
    def backward(ctx, dout):
        Q, K, V, D = ctx.saved_tensors
        D = D.clone()
        D[..., ctx.mine, :] = dout
        with torch.enable_grad():
            ts = [t.detach().requires_grad_() for t in (Q, K, V)]
            grads = torch.autograd.grad(_attention(*ts), ts, D)
        dq, dk, dv = (g[..., ctx.mine, :].contiguous() for g in grads)
        w = dist.get_world_size()
        _hops([torch.stack([dk, dv])], w - 1)    # as if K/V went round
        _hops([torch.stack([dk, dv])], w)        # ... and dK/dV came home
        return dq, dk, dv


def ring_attention(q, k, v):
    return Alone.apply(q, k, v)
