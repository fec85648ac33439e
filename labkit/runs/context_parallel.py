"""Context parallelism checked against full attention, in one launch.

    torchrun --nproc-per-node 4 -m labkit.runs.context_parallel \
        --methods ring,ring_balanced,ulysses --seq 64 --heads 4
    torchrun --nproc-per-node 4 -m labkit.runs.context_parallel \
        --methods ring,ring_balanced --heads 4 --kv-heads 2     # GQA

Every rank draws the same global ``q`` (``[b, heads, s, d]``), ``k, v``
(``[b, kv_heads, s, d]``; fewer K/V heads than query heads is
grouped-query attention) and output gradient from the seed, computes full
attention in one process as the reference (PyTorch's
``scaled_dot_product_attention``, math kernel, on K/V repeated for the
query heads, so dK and dV are the sums over each head's copies),
then runs each method (:mod:`labkit.runs.blocks.cp_attention`) on its own slice of
the sequence, causal and not:

- ``ring``: contiguous chunks, K/V round the ring;
- ``ring_balanced``: the zigzag order (chunks ``r`` and ``2p - 1 - r``);
- ``ulysses``: all-to-all to whole sequences of ``heads/p`` heads.

Each rank saves, per method and mask: the largest differences of its
output and of its dQ, dK, dV to the reference's rows for the positions it
holds; the collectives of the forward and backward pass
(:class:`labkit.measure.collectives.CollectiveCounter`); the bytes the
attention saved for backward (``saved_tensors_hooks``); the query-key
pairs it computed (the causal load); and, with ``--time-steps K``, the
median time of K forward + backward passes. With ``--torch-cp`` it also
tries PyTorch's own ``torch.distributed.tensor.experimental.context_parallel``
and records whether it ran.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as tdist
import torch.nn.functional as F

from labkit import dist
from labkit.measure.collectives import CollectiveCounter
from labkit.runs.blocks import cp_attention as A

METHODS = ("ring", "ring_balanced", "ulysses")


def local_rows(x, rank, world, balanced):
    """This rank's slice of a ``[b, heads, s, d]`` tensor."""
    return torch.cat([x[..., s:s + n, :] for s, n in
                      A.chunks(rank, world, x.shape[-2], balanced)], dim=-2)


def run(method, causal, q, k, v, dout, ctx):
    balanced = method == "ring_balanced"
    qs, ks, vs, ds = (local_rows(t, ctx.rank, ctx.world_size, balanced)
                      for t in (q, k, v, dout))
    qs, ks, vs = (t.clone().requires_grad_(True) for t in (qs, ks, vs))
    work = A._Work()
    saved: dict = {}

    def pack(t):
        saved[t.untyped_storage()._cdata] = t.numel() * t.element_size()
        return t

    with CollectiveCounter() as fwd, \
            torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if method == "ulysses":
            out = A.ulysses_attention(qs, ks, vs, causal, work=work)
        else:
            out = A.ring_attention(qs, ks, vs, causal, balanced, work=work)
    with CollectiveCounter() as bwd:
        out.backward(ds)
    return out.detach(), (qs.grad, ks.grad, vs.grad), {
        "comm_forward": fwd.summary(), "comm_backward": bwd.summary(),
        "saved_bytes": sum(saved.values()), "pairs": work.pairs}


def timed(method, causal, q, k, v, dout, ctx, steps):
    times = []
    for _ in range(steps):
        dist.sync(ctx)
        tdist.barrier()
        t0 = time.perf_counter()
        run(method, causal, q, k, v, dout, ctx)
        dist.sync(ctx)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) if times else None


def try_torch_cp(q, k, v, ctx) -> str:
    """PyTorch's own context parallelism, where it runs: "ok" or why not."""
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.experimental import context_parallel
        mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
        bufs = [t.clone() for t in (q, k, v)]
        with context_parallel(mesh, buffers=bufs, buffer_seq_dims=[2] * 3):
            x = [t.detach().requires_grad_() for t in bufs]
            F.scaled_dot_product_attention(*x, is_causal=True).sum() \
                .backward()
        return "ok"
    except Exception as e:  # noqa: BLE001 - the reason is the result
        return f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=0,
                    help="K/V heads (GQA); 0: as many as --heads")
    ap.add_argument("--head-dim", type=int, default=16)
    ap.add_argument("--time-steps", type=int, default=0)
    ap.add_argument("--torch-cp", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    methods = a.methods.split(",")
    if set(methods) - set(METHODS):
        raise SystemExit(f"unknown methods {set(methods) - set(METHODS)}")
    ctx = dist.init()
    p = ctx.world_size
    kv = a.kv_heads = a.kv_heads or a.heads
    if a.seq % (2 * p) or a.heads % p or a.heads % kv:
        raise SystemExit(f"seq {a.seq} must divide by 2 x {p} ranks, "
                         f"heads {a.heads} by {p} and by kv_heads {kv}")
    if "ulysses" in methods and kv % p:
        raise SystemExit(f"ulysses needs p <= KV heads: kv_heads {kv} "
                         f"do not split over {p} ranks")
    g = torch.Generator().manual_seed(a.seed)
    shape = (a.batch, a.heads, a.seq, a.head_dim)
    kv_shape = (a.batch, kv, a.seq, a.head_dim)
    q, k, v, dout = (torch.randn(sh, generator=g).to(ctx.device)
                     for sh in (shape, kv_shape, kv_shape, shape))
    results = []
    for causal in (False, True):
        x = [t.clone().requires_grad_(True) for t in (q, k, v)]
        with torch.nn.attention.sdpa_kernel(
                torch.nn.attention.SDPBackend.MATH):
            ref = F.scaled_dot_product_attention(
                x[0], *(A.repeat_kv(t, a.heads // kv) for t in x[1:]),
                is_causal=causal)
        ref.backward(dout)
        for method in methods:
            balanced = method == "ring_balanced"

            def mine(t):
                return local_rows(t, ctx.rank, p, balanced)

            out, grads, rec = run(method, causal, q, k, v, dout, ctx)
            rec.update({
                "method": method, "causal": causal,
                "out_diff": (out - mine(ref.detach())).abs().max().item(),
                "grad_diff": max((gr - mine(t.grad)).abs().max().item()
                                 for gr, t in zip(grads, x)),
                "scale": ref.abs().max().item(),
                "seconds": timed(method, causal, q, k, v, dout, ctx,
                                 a.time_steps)})
            results.append(rec)
    group = a.heads // kv   # PyTorch's CP on the MHA-equivalent K/V
    torch_cp = (try_torch_cp(q, A.repeat_kv(k, group), A.repeat_kv(v, group),
                             ctx) if a.torch_cp else None)
    dist.save(ctx, {"config": vars(a), "results": results,
                    "torch_context_parallel": torch_cp})
    dist.close()


if __name__ == "__main__":
    main()
