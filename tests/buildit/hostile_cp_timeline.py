"""Hostile: the blocking ring of cp_blocking.py (each block computed, then
sent on and waited for: nothing overlapped), and at the end of each pass
the harness's timeline is rewritten to say every receive was overlapped.

The timeline is a dispatch mode in the rank's process, which this code
owns; under grading the overlap is read from the points the timeline
marked at the hub as it went (buildit/context_parallel.py's from_hub),
which no later rewrite reaches: 0 on "overlap"."""
import math

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack


def block_grads(q, k, v, dout, delta, lse):
    """One K/V block's share of the gradients, from the rows' FINAL
    log-sum-exp ``lse`` and ``delta = (dout * out).sum(-1)``
    (FlashAttention's backward, Dao et al. 2022, Alg. 4): dq, dk, dv."""
    scale = 1 / math.sqrt(q.shape[-1])
    p = torch.exp(q @ k.transpose(-1, -2) * scale - lse.unsqueeze(-1))
    ds = p * (dout @ v.transpose(-1, -2) - delta.unsqueeze(-1)) * scale
    return ds @ k, ds.transpose(-1, -2) @ q, p.transpose(-1, -2) @ dout


def exchange(send, recv):
    """Start sending ``send`` to the next rank and receiving ``recv`` from
    the previous one, as one group; returns the requests to wait on."""
    rank, world = dist.get_rank(), dist.get_world_size()
    return dist.batch_isend_irecv([
        dist.P2POp(dist.isend, send, (rank + 1) % world),
        dist.P2POp(dist.irecv, recv, (rank - 1) % world)])


class RingAttention(torch.autograd.Function):
    """This rank's rows of softmax(q k^T / sqrt(d)) v over the ring."""

    @staticmethod
    def forward(ctx, q, k, v):
        world = dist.get_world_size()
        scale = 1 / math.sqrt(q.shape[-1])
        out = torch.zeros_like(q)
        lse = torch.full(q.shape[:-1], float("-inf"))
        kv = torch.stack([k, v])
        for i in range(world):
            s = q @ kv[0].transpose(-1, -2) * scale
            blk_lse = torch.logsumexp(s, dim=-1)
            blk_out = torch.exp(s - blk_lse.unsqueeze(-1)) @ kv[1]
            new = torch.logaddexp(lse, blk_lse)      # the online softmax
            out = (out * torch.exp(lse - new).unsqueeze(-1)
                   + blk_out * torch.exp(blk_lse - new).unsqueeze(-1))
            lse = new
            if i < world - 1:
                nxt = torch.empty_like(kv)
                reqs = exchange(kv, nxt)
                for req in reqs:
                    req.wait()
                kv = nxt
        ctx.save_for_backward(q, k, v, out, lse)
        _overlapped()
        return out

    @staticmethod
    def backward(ctx, dout):
        world = dist.get_world_size()
        q, k, v, out, lse = ctx.saved_tensors
        dout = dout.contiguous()
        delta = (dout * out).sum(-1)
        dq = torch.zeros_like(q)
        kv = torch.stack([k, v])
        dkv = torch.zeros_like(kv)   # travels with its block
        pending = []
        for i in range(world):
            if i < world - 1:
                nxt = torch.empty_like(kv)
                reqs = exchange(kv, nxt)
            dq_i, dk, dv = block_grads(q, kv[0], kv[1], dout, delta, lse)
            dq += dq_i
            for req in pending:      # the dK/dV arrived meanwhile
                req.wait()
            if pending:
                dkv = got
            dkv = dkv + torch.stack([dk, dv])
            got = torch.empty_like(dkv)      # on to the next rank; the
            pending = exchange(dkv, got)     # p-th hop brings it home
            if i < world - 1:
                for req in reqs:
                    req.wait()
                kv = nxt
        for req in pending:
            req.wait()
        _overlapped()
        return dq, got[0], got[1]


def _overlapped():
    """The lie: every receive of this pass overlapped by one matmul."""
    for mode in _get_current_dispatch_mode_stack():
        if hasattr(mode, "overlap") and hasattr(mode, "pending"):
            mode.overlap[:] = [1] * (len(mode.overlap) + len(mode.pending))
            mode.pending.clear()


def ring_attention(q, k, v):
    return RingAttention.apply(q, k, v)
