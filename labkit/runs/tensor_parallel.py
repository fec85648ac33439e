"""Tensor parallelism of one transformer block, checked against the original.

    torchrun --nproc-per-node 2 -m labkit.runs.tensor_parallel \
        --variants scratch,dtensor,wrong_split

Every rank builds the same block of the course's GPT (``labkit.model.Block``:
LayerNorm, causal self-attention, LayerNorm, GELU MLP, residuals) from one
seed, runs it unsharded as the reference, and then runs a tensor-parallel
version of it over all ranks, Megatron-style (Shoeybi et al. 2019, Sec. 3):

- ``scratch``: column- and row-parallel linear layers written here with
  ``torch.distributed.all_reduce`` and the two operators ``f`` (identity
  forward, all-reduce backward) and ``g`` (all-reduce forward, identity
  backward); the fused QKV weight is split by heads.
- ``dtensor``: the same split with PyTorch's ``parallelize_module``,
  ``ColwiseParallel`` on separate Q, K, V projections and the MLP's first
  layer, ``RowwiseParallel`` on the two output projections.
- ``wrong_split``: ``ColwiseParallel`` on the *fused* QKV layer, as one
  would naively write it. The fused weight ``[3h, h]`` is cut into
  contiguous row blocks, so rank 0 gets all of Q and part of K instead of
  the Q, K and V of its own heads. Every shape still fits: no error, wrong
  numbers. The check below catches it.
- ``no_comm``: the scratch split with its collectives switched off (wrong
  numbers), to time the computation alone.
- ``megatron`` (optional, needs ``megatron-core``): the same split with
  megatron-core's ``ColumnParallelLinear`` / ``RowParallelLinear``, which
  run on CPU with gloo when built with ``use_cpu_initialization=True``.

For each variant the record holds the largest differences to the reference
(output, input gradient, every parameter gradient reassembled from the
shards, the parameters after one SGD step, and the output after it), the
collectives of one forward and one backward pass counted by
:class:`labkit.measure.collectives.CollectiveCounter`, and the median time
of a forward + backward pass.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
import torch.distributed as tdist

from labkit import device as D
from labkit import dist
from labkit.measure.collectives import CollectiveCounter
from labkit.model import GPTConfig, build
from labkit.runs.tp_dtensor import dtensor_block, dtensor_full_grads
from labkit.runs.tp_layers import (LocalAttention, LocalMLP,  # noqa: F401
                                   TPBlock, separate_qkv)
from labkit.runs.tp_megatron import megatron_available, megatron_block
from labkit.runs.tp_scratch import (ColumnParallelLinear,  # noqa: F401
                                    RowParallelLinear, qkv_rows,
                                    scratch_block, scratch_full_grads)

VARIANTS = ("scratch", "dtensor", "wrong_split", "no_comm", "megatron")
SCRATCH_LAYOUT = ("scratch", "no_comm", "megatron")  # same shards
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
STEP = 0.1  # SGD update / parameters (RMS) of the after-step check


def full_params(block: TPBlock, variant: str, heads: int, tp: int) -> dict:
    """The parameters, reassembled like the gradients are."""
    for p in block.parameters():  # the gradient helpers read .grad
        p.grad = p.detach().clone()
    return (scratch_full_grads(block, heads, tp)
            if variant in SCRATCH_LAYOUT else dtensor_full_grads(block))


# --------------------------------------------------------------------------
# The check
# --------------------------------------------------------------------------

def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


def step_lr(params: dict, grads: dict, step: float) -> float:
    """The SGD learning rate whose update is ``step`` x the parameters (RMS).

    ``lr = step * ||theta|| / ||g||``: the update ``lr g`` has the norm
    ``step ||theta||`` whatever the size of the loss, so the output after
    the step moves by a fraction of order ``step`` (big enough to show an
    update applied wrongly on a shard) while the weights stay of the same
    size (a fixed lr on the summed loss grows them with h, s and b, and the
    rounding of the step with them). The same on every rank: computed from
    the reference block, which every rank holds.
    """
    def norm(ts):
        return torch.cat([t.detach().float().flatten() for t in ts]).norm()

    names = list(grads)
    return (step * norm(params[n] for n in names)
            / norm(grads[n] for n in names)).item()


def run_variant(variant, ref_state, ref_out, ref_grads, ref_xgrad,
                ref_after, ref_out2, cfg, x, w, x2, lr, ctx, mesh,
                timing_steps) -> dict:
    from labkit.model import Block
    tp, rank = ctx.world_size, ctx.rank
    ref = Block(cfg).to(device=x.device, dtype=x.dtype)
    ref.load_state_dict(ref_state)
    if variant in ("scratch", "no_comm"):
        block = scratch_block(ref, cfg.heads, rank, tp,
                              comm=variant == "scratch")
    elif variant == "megatron":
        block = megatron_block(ref, cfg.heads, rank, tp)
    else:
        block = dtensor_block(ref, cfg.heads, mesh,
                              fused_qkv=variant == "wrong_split")
    xin = x.clone().requires_grad_(True)
    with CollectiveCounter() as fwd:
        out = block(xin)
        loss = (out * w).sum()
    with CollectiveCounter() as bwd:
        loss.backward()
    grads = (scratch_full_grads(block, cfg.heads, tp)
             if variant in SCRATCH_LAYOUT else dtensor_full_grads(block))
    grad_diff = {n: max_diff(g, ref_grads[n]) for n, g in grads.items()}
    opt = torch.optim.SGD(block.parameters(), lr=lr)
    opt.step()
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        out2 = block(x2)
    after = full_params(block, variant, cfg.heads, tp)
    param_diff = {n: max_diff(p, ref_after[n]) for n, p in after.items()}
    times = []
    for _ in range(timing_steps):
        xi = x.clone().requires_grad_(True)
        D.sync(ctx.device)
        tdist.barrier()
        t0 = time.perf_counter()
        (block(xi) * w).sum().backward()
        D.sync(ctx.device)
        times.append(time.perf_counter() - t0)
        block.zero_grad(set_to_none=True)
    scale = ref_out.float().abs().max().item()
    return {
        "variant": variant,
        "out_diff": max_diff(out, ref_out),
        "out_scale": scale,
        "xgrad_diff": max_diff(xin.grad, ref_xgrad),
        "grad_diff": grad_diff,
        "grad_scale": max(g.float().abs().max().item()
                          for g in ref_grads.values()),
        "param_diff_after_step": param_diff,
        "out_diff_after_step": max_diff(out2, ref_out2),
        "out2_scale": ref_out2.float().abs().max().item(),
        "comm_forward": fwd.summary(),
        "comm_backward": bwd.summary(),
        "local_params": sum(p.to_local().numel() if hasattr(p, "to_local")
                            else p.numel() for p in block.parameters()),
        "seconds_fwd_bwd": times,
        "seconds_fwd_bwd_median": statistics.median(times) if times else None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", default="scratch,dtensor,wrong_split")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--batch", type=int, default=4, help="micro-batch")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    ap.add_argument("--step", type=float, default=STEP,
                    help="SGD update / parameters, in RMS (see step_lr)")
    ap.add_argument("--timing-steps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    variants = a.variants.split(",")
    bad = set(variants) - set(VARIANTS)
    if bad:
        raise SystemExit(f"unknown variants {sorted(bad)}: {VARIANTS}")
    if "megatron" in variants and not megatron_available():
        raise SystemExit("variant megatron needs megatron-core installed")
    ctx = dist.init()
    tp = ctx.world_size
    if a.heads % tp or a.hidden % a.heads:
        raise SystemExit(f"heads {a.heads} must divide by tp {tp} and "
                         f"hidden {a.hidden} by heads")
    # exact fp32 matmuls for the check (flags only: harmless on CPU)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dtype = DTYPES[a.dtype]
    cfg = GPTConfig(vocab=8, seq=a.seq, layers=1, hidden=a.hidden,
                    heads=a.heads)
    # The reference: block 0 of the course's GPT, biases and LayerNorms
    # perturbed so that a bias added twice (or not at all) would show.
    ref = build(cfg, seed=a.seed).blocks[0]
    g = torch.Generator().manual_seed(a.seed + 1)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g))
    ref = ref.to(device=ctx.device, dtype=dtype)
    x = torch.randn(a.batch, a.seq, a.hidden, generator=g).to(ctx.device,
                                                              dtype)
    w = torch.randn(a.batch, a.seq, a.hidden, generator=g).to(ctx.device,
                                                              dtype)
    x2 = torch.randn(a.batch, a.seq, a.hidden, generator=g).to(ctx.device,
                                                               dtype)
    ref_state = copy.deepcopy(ref.state_dict())
    xr = x.clone().requires_grad_(True)
    ref_out = ref(xr)
    (ref_out * w).sum().backward()
    ref_grads = {n: p.grad.clone() for n, p in ref.named_parameters()}
    lr = step_lr(ref_state, ref_grads, a.step)
    with torch.no_grad():
        ref_out2_before = ref(x2)
    torch.optim.SGD(ref.parameters(), lr=lr).step()
    ref_after = {n: p.detach().clone() for n, p in ref.named_parameters()}
    with torch.no_grad():
        ref_out2 = ref(x2)
    step_effect = (max_diff(ref_out2, ref_out2_before)
                   / ref_out2.float().abs().max().item())
    mesh = None
    if any(v in ("dtensor", "wrong_split") for v in variants):
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh(ctx.device.type, (tp,))
    results = [run_variant(v, ref_state, ref_out.detach(), ref_grads,
                           xr.grad, ref_after, ref_out2, cfg, x, w, x2, lr,
                           ctx, mesh, a.timing_steps) for v in variants]
    dist.save(ctx, {"config": vars(a), "tp": tp, "lr": lr,
                    "device_name": D.name(ctx.device),
                    "step_effect": step_effect,
                    "dtype_bytes": torch.tensor([], dtype=dtype)
                    .element_size(),
                    "ref_params": sum(p.numel() for p in ref.parameters()),
                    "results": results})
    dist.close()


if __name__ == "__main__":
    main()
