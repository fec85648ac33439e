"""Context-parallel attention: ring attention and Ulysses, on torch.distributed.

    torchrun --nproc-per-node 4 -m labkit.runs.context_parallel

Every rank holds ``n = s/p`` tokens of the sequence (queries
``[b, heads, n, d]``, keys and values ``[b, kv_heads, n, d]``).

**Grouped-query attention** (Ainslie et al. 2023): with fewer K/V heads
than query heads, K and V travel (and are saved) at ``kv_heads`` heads;
each block repeats them for its ``heads / kv_heads`` query heads only
where it computes (:func:`repeat_kv`, as ``labkit.nn.decoder.repeat_kv``),
and folds the repeated heads' gradients back (:func:`fold_kv`). The ring
then sends ``kv_heads / heads`` of the MHA bytes
(:func:`labkit.predict.context_parallel.ring_bytes` with ``kv_hidden``).

**Ring attention** (Liu et al. 2023, "Ring Attention with Blockwise
Transformers"; the blockwise softmax of Milakov & Gimelshein 2018 and
FlashAttention, Dao et al. 2022): the queries stay, the keys and values go
round the ring. At step ``i`` a rank attends its queries to the K/V block
of rank ``r - i`` while it already sends that block on to ``r + 1`` and
receives the next from ``r - 1`` (one ``isend``/``irecv`` pair grouped by
``batch_isend_irecv``, overlapped with the computation), and merges the block's result into its running output with
the log-sum-exp of each row (the online softmax). Backward runs the ring
again: K/V travel ``p - 1`` hops, and the gradients dK/dV of each block
travel with them, ``p`` hops, so that they end at the rank that owns the
block.

With a causal mask and contiguous chunks rank ``r`` has ``r + 1`` blocks to
compute and rank 0 one: the last rank paces the ring. The load-balanced
("zigzag") order cuts the sequence into ``2p`` chunks and gives rank ``r``
chunks ``r`` and ``2p - 1 - r``: every rank then computes ``2p + 1``
half-chunk blocks (Llama 3, Dubey et al. 2024, Sec. 3.3.2; Megatron-LM's
context parallelism).

**Ulysses** (Jacobs et al. 2023, "DeepSpeed Ulysses"): an all-to-all turns
``[b, heads, s/p, d]`` into ``[b, heads/p, s, d]`` (every rank now has the
whole sequence for ``1/p`` of the heads), attention runs locally, and a
second all-to-all turns the output back; backward does the same in
reverse. Four all-to-alls each way.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as tdist


def chunks(rank: int, world: int, seq: int, balanced: bool) -> list:
    """``[(start, length), ...]``: the global positions a rank holds, in
    the order it stores them (contiguous, or zigzag when ``balanced``)."""
    if not balanced:
        n = seq // world
        return [(rank * n, n)]
    c = seq // (2 * world)
    return [(rank * c, c), ((2 * world - 1 - rank) * c, c)]


def _sub(chs):
    """Local row slices and global positions of each chunk."""
    out, off = [], 0
    for start, length in chs:
        out.append((slice(off, off + length), start, length))
        off += length
    return out


class _Work:
    pairs = 0  # (query, key) pairs of the blocks this rank computed


def _blocks(q_chs, k_chs, causal):
    """The (query chunk, key chunk, needs a mask) pairs to compute: a key
    chunk entirely after a query chunk is skipped under a causal mask."""
    for qs, q0, qn in _sub(q_chs):
        for ks, k0, kn in _sub(k_chs):
            if causal and k0 > q0 + qn - 1:
                continue
            yield qs, ks, q0, k0, qn, kn, causal and k0 + kn - 1 > q0


def _scores(q, k, q0, k0, masked, scale):
    s = q @ k.transpose(-1, -2) * scale
    if masked:
        qp = torch.arange(q0, q0 + q.shape[-2], device=q.device)[:, None]
        kp = torch.arange(k0, k0 + k.shape[-2], device=q.device)[None]
        s = s.masked_fill(kp > qp, float("-inf"))
    return s


def repeat_kv(x, group: int):
    """``[b, kv_heads, n, d]`` -> ``[b, kv_heads * group, n, d]``: K/V
    head ``j`` serves query heads ``j * group ... (j + 1) * group - 1``."""
    return x if group == 1 else x.repeat_interleave(group, dim=1)


def fold_kv(g, group: int):
    """The gradient of :func:`repeat_kv`: each K/V head's copies summed."""
    if group == 1:
        return g
    b, h, n, d = g.shape
    return g.view(b, h // group, group, n, d).sum(2)


def block_forward(q, k, v, q_chs, k_chs, causal, out, lse, work):
    """Merge attention of ``q`` to one K/V block into ``out``/``lse``."""
    scale = 1 / math.sqrt(q.shape[-1])
    group = q.shape[1] // k.shape[1]           # GQA: query heads per K/V
    k, v = repeat_kv(k, group), repeat_kv(v, group)
    for qs, ks, q0, k0, qn, kn, masked in _blocks(q_chs, k_chs, causal):
        s = _scores(q[..., qs, :], k[..., ks, :], q0, k0, masked, scale)
        blk_lse = torch.logsumexp(s, dim=-1)
        blk_out = torch.exp(s - blk_lse.unsqueeze(-1)) @ v[..., ks, :]
        new = torch.logaddexp(lse[..., qs], blk_lse)   # online softmax
        out[..., qs, :] = (out[..., qs, :]
                           * torch.exp(lse[..., qs] - new).unsqueeze(-1)
                           + blk_out * torch.exp(blk_lse - new).unsqueeze(-1))
        lse[..., qs] = new
        work.pairs += qn * kn


def block_backward(q, k, v, dout, delta, lse, q_chs, k_chs, causal, dq):
    """FlashAttention's backward of one block (Dao et al. 2022, Alg. 4):
    adds to ``dq`` and returns this block's ``dk``, ``dv``."""
    scale = 1 / math.sqrt(q.shape[-1])
    group = q.shape[1] // k.shape[1]
    k, v = repeat_kv(k, group), repeat_kv(v, group)
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    for qs, ks, q0, k0, _, _, masked in _blocks(q_chs, k_chs, causal):
        s = _scores(q[..., qs, :], k[..., ks, :], q0, k0, masked, scale)
        p = torch.exp(s - lse[..., qs].unsqueeze(-1))
        dv[..., ks, :] += p.transpose(-1, -2) @ dout[..., qs, :]
        dp = dout[..., qs, :] @ v[..., ks, :].transpose(-1, -2)
        ds = p * (dp - delta[..., qs].unsqueeze(-1)) * scale
        dq[..., qs, :] += ds @ k[..., ks, :]
        dk[..., ks, :] += ds.transpose(-1, -2) @ q[..., qs, :]
    return fold_kv(dk, group), fold_kv(dv, group)


def _ring_peers(group):
    r, p = tdist.get_rank(group), tdist.get_world_size(group)
    glob = (lambda x: tdist.get_global_rank(group, x)) if group else (
        lambda x: x)
    return r, p, glob((r + 1) % p), glob((r - 1) % p)


def _start(send, recv, nxt, prv, group, tag=0):
    """Send to the next rank, receive from the previous one, as ONE group
    (``batch_isend_irecv``): under NCCL a send and a receive issued as two
    separate calls share one stream, and with every rank sending first the
    sends wait on receives queued behind them -- a hang. K/V use tag 0,
    the travelling dK/dV tag 1: both go the same way at once."""
    return tdist.batch_isend_irecv([
        tdist.P2POp(tdist.isend, send, nxt, group, tag),
        tdist.P2POp(tdist.irecv, recv, prv, group, tag)])


class RingAttention(torch.autograd.Function):
    """``out = softmax(q k^T / sqrt(d)) v`` over the whole ring."""

    @staticmethod
    def forward(ctx, q, k, v, causal, balanced, group, work):
        r, p, nxt, prv = _ring_peers(group)
        s = q.shape[-2] * p
        out = torch.zeros_like(q)
        lse = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype,
                         device=q.device)
        kv = torch.stack([k, v]).contiguous()
        q_chs = chunks(r, p, s, balanced)
        for i in range(p):
            if i < p - 1:  # the next block travels while this one computes
                nxt_kv = torch.empty_like(kv)
                reqs = _start(kv, nxt_kv, nxt, prv, group)
            block_forward(q, kv[0], kv[1], q_chs,
                          chunks((r - i) % p, p, s, balanced), causal, out,
                          lse, work)
            if i < p - 1:
                for req in reqs:
                    req.wait()
                kv = nxt_kv
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (causal, balanced, group, work)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        causal, balanced, group, work = ctx.args
        r, p, nxt, prv = _ring_peers(group)
        s = q.shape[-2] * p
        dout = dout.contiguous()
        delta = (dout * out).sum(-1)
        dq = torch.zeros_like(q)
        kv = torch.stack([k, v]).contiguous()
        dkv = torch.zeros_like(kv)   # travels with its K/V block
        q_chs = chunks(r, p, s, balanced)
        pending = []
        for i in range(p):
            if i < p - 1:
                nxt_kv = torch.empty_like(kv)
                reqs = _start(kv, nxt_kv, nxt, prv, group)
            dk, dv = block_backward(q, kv[0], kv[1], dout, delta, lse, q_chs,
                                    chunks((r - i) % p, p, s, balanced),
                                    causal, dq)
            for req in pending:     # the previous dK/dV arrived meanwhile
                req.wait()
            if pending:
                dkv = got
            dkv = dkv + torch.stack([dk, dv])
            if p > 1:               # on to the next rank; the p-th hop
                got = torch.empty_like(dkv)   # brings it home
                pending = _start(dkv.contiguous(), got, nxt, prv, group,
                                 tag=1)
            if i < p - 1:
                for req in reqs:
                    req.wait()
                kv = nxt_kv
        for req in pending:
            req.wait()
        if pending:
            dkv = got
        return dq, dkv[0], dkv[1], None, None, None, None


def ring_attention(q, k, v, causal=False, balanced=False, group=None,
                   work=None):
    """Ring attention of this rank's ``[b, heads, n, d]`` queries and
    ``[b, kv_heads, n, d]`` keys and values."""
    return RingAttention.apply(q, k, v, causal, balanced, group,
                               work or _Work())


class _AllToAll(torch.autograd.Function):
    """``[b, H, n, d]`` (heads whole) <-> ``[b, H/p, s, d]`` (sequence
    whole); the backward is the opposite exchange."""

    @staticmethod
    def forward(ctx, x, to_heads, group):
        ctx.args = (to_heads, group)
        return _exchange(x, to_heads, group)

    @staticmethod
    def backward(ctx, g):
        to_heads, group = ctx.args
        return _exchange(g.contiguous(), not to_heads, group), None, None


def _exchange(x, to_heads, group):
    p = tdist.get_world_size(group)
    b, h, n, d = x.shape
    if to_heads:   # send head group j to rank j, receive sequence chunks
        send = x.reshape(b, p, h // p, n, d).transpose(0, 1).contiguous()
        recv = torch.empty_like(send)
        tdist.all_to_all_single(recv, send, group=group)
        return recv.permute(1, 2, 0, 3, 4).reshape(b, h // p, p * n, d)
    send = x.reshape(b, h, p, n // p, d).permute(2, 0, 1, 3, 4).contiguous()
    recv = torch.empty_like(send)
    tdist.all_to_all_single(recv, send, group=group)
    return recv.transpose(0, 1).reshape(b, p * h, n // p, d)


def ulysses_attention(q, k, v, causal=False, group=None, work=None):
    """Ulysses: all-to-all to whole sequences of ``heads/p`` heads, local
    attention (the blockwise kernel above on one rank), all-to-all back.
    With GQA each rank gets ``kv_heads/p`` whole K/V heads -- those of its
    query heads -- so ``p`` must divide ``kv_heads``."""
    p = tdist.get_world_size(group)
    if k.shape[1] % p:
        raise ValueError(f"Ulysses needs p <= KV heads: {k.shape[1]} K/V "
                         f"heads do not split over {p} ranks")
    q, k, v = (_AllToAll.apply(t, True, group) for t in (q, k, v))
    out = LocalAttention.apply(q, k, v, causal, work or _Work())
    return _AllToAll.apply(out, False, group)


class LocalAttention(torch.autograd.Function):
    """The same blockwise kernel on one rank (no ring): full attention
    that saves ``q, k, v, out`` and the row log-sum-exp, as FlashAttention
    does."""

    @staticmethod
    def forward(ctx, q, k, v, causal, work):
        s = q.shape[-2]
        out = torch.zeros_like(q)
        lse = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype,
                         device=q.device)
        block_forward(q, k, v, [(0, s)], [(0, s)], causal, out, lse, work)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        s = q.shape[-2]
        delta = (dout * out).sum(-1)
        dq = torch.zeros_like(q)
        dk, dv = block_backward(q, k, v, dout, delta, lse, [(0, s)],
                                [(0, s)], ctx.causal, dq)
        return dq, dk, dv, None, None
