"""Tensor parallelism of one transformer block, checked against the original.

    torchrun --nproc-per-node 2 -m labkit.runs.tensor_parallel \
        --variants scratch,dtensor,wrong_split

Every rank builds the same block of the course's GPT (``labkit.nn.model.Block``:
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
- ``no_kv_sum``, ``wrong_kv_group`` (Llama-style block only): the scratch
  split with the K/V copies' gradients not summed, or summed over ranks
  that hold different heads (:mod:`labkit.runs.tp.kv_copies`); wrong
  gradients where ``tp`` is above the K/V heads.
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
from labkit.nn.model import GPTConfig, build, build_arch
from labkit.predict.tensor_parallel.gqa import kv_split
from labkit.runs.tp.dtensor import dtensor_block, dtensor_full_grads
from labkit.runs.tp.gqa import llama_record, llama_split  # noqa: F401
from labkit.runs.tp.layers import (LocalAttention, LocalMLP,  # noqa: F401
                                   TPBlock, separate_qkv)
from labkit.runs.tp.megatron import megatron_available, megatron_block
from labkit.runs.tp.scratch import (ColumnParallelLinear,  # noqa: F401
                                    RowParallelLinear, qkv_rows,
                                    scratch_block, scratch_full_grads)

VARIANTS = ("scratch", "dtensor", "wrong_split", "no_comm", "megatron")
SCRATCH_LAYOUT = ("scratch", "no_comm", "megatron")  # same shards
LLAMA_VARIANTS = ("scratch", "dtensor", "no_comm",   # labkit.runs.tp.gqa
                  "no_kv_sum", "wrong_kv_group")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp64": torch.float64}
STEP = 0.1  # SGD update / parameters (RMS) of the after-step check


# --------------------------------------------------------------------------
# The check
# --------------------------------------------------------------------------

def max_diff(a: torch.Tensor, b: torch.Tensor,
             dtype=torch.float32) -> float:
    return (a.to(dtype) - b.to(dtype)).abs().max().item()


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


def gpt_split(variant, cfg, ctx, mesh, like):
    """``(block, full_grads, sync)`` of a GPT-block variant."""
    from labkit.nn.model import Block
    tp, rank = ctx.world_size, ctx.rank
    ref = Block(cfg).to(device=like.device, dtype=like.dtype)
    if variant in ("scratch", "no_comm"):
        block = lambda r: scratch_block(r, cfg.heads, rank, tp,  # noqa
                                        comm=variant == "scratch")
    elif variant == "megatron":
        block = lambda r: megatron_block(r, cfg.heads, rank, tp)  # noqa
    else:
        block = lambda r: dtensor_block(r, cfg.heads, mesh,  # noqa
                                        fused_qkv=variant == "wrong_split")
    grads = ((lambda b: scratch_full_grads(b, cfg.heads, tp))
             if variant in SCRATCH_LAYOUT else dtensor_full_grads)
    return ref, block, grads, None


def run_variant(variant, ref_state, ref_out, ref_grads, ref_xgrad,
                ref_after, ref_out2, split, x, w, x2, lr, ctx,
                timing_steps, exact=None) -> dict:
    ref, make, full_grads, sync = split
    ref.load_state_dict(ref_state)
    block = make(ref)
    xin = x.clone().requires_grad_(True)
    with CollectiveCounter() as fwd:
        out = block(xin)
        loss = (out * w).sum()
    with CollectiveCounter() as bwd:
        loss.backward()
    with CollectiveCounter() as kv_sync:   # replicated K/V heads only
        if sync is not None:
            sync(block)
    grads = full_grads(block)
    grad_diff = {n: max_diff(g, ref_grads[n]) for n, g in grads.items()}
    exact_diff = ({n: max_diff(g, exact[n], torch.float64)
                   for n, g in grads.items()} if exact else None)
    opt = torch.optim.SGD(block.parameters(), lr=lr)
    opt.step()
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        out2 = block(x2)
    for p in block.parameters():  # the gradient helpers read .grad
        p.grad = p.detach().clone()
    after = full_grads(block)
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
        "comm_kv_grad_sync": kv_sync.summary(),
        "grad_diff_fp64": exact_diff,   # against one fp64 process
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
    ap.add_argument("--llama-variants", default="",
                    help=f"the Llama-style block too: {LLAMA_VARIANTS}")
    ap.add_argument("--kv-heads", type=int, default=2,
                    help="the Llama-style block's K/V heads (GQA)")
    a = ap.parse_args()
    variants = a.variants.split(",")
    llama = [v for v in a.llama_variants.split(",") if v]
    bad = set(variants) - set(VARIANTS) | set(llama) - set(LLAMA_VARIANTS)
    if bad:
        raise SystemExit(f"unknown variants {sorted(bad)}: {VARIANTS}; "
                         f"Llama-style: {LLAMA_VARIANTS}")
    if "megatron" in variants and not megatron_available():
        raise SystemExit("variant megatron needs megatron-core installed")
    ctx = dist.init()
    tp = ctx.world_size
    if a.heads % tp or a.hidden % a.heads:
        raise SystemExit(f"heads {a.heads} must divide by tp {tp} and "
                         f"hidden {a.hidden} by heads")
    if llama:   # the K/V heads split or are replicated, or one clear line
        try:
            split = kv_split(llama_record(a.hidden, a.heads, a.kv_heads,
                                          a.seq), tp)
        except ValueError as e:
            raise SystemExit(f"llama block: {e}") from None
        if "dtensor" in llama and split["replicas"] > 1:
            raise SystemExit(f"llama dtensor: ColwiseParallel cannot "
                             f"replicate {a.kv_heads} K/V heads over "
                             f"tp={tp} (use scratch)")
    # exact fp32 matmuls for the check (flags only: harmless on CPU)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dtype = DTYPES[a.dtype]
    cfg = GPTConfig(vocab=8, seq=a.seq, layers=1, hidden=a.hidden,
                    heads=a.heads)
    # The reference: block 0 of the course's GPT, biases and norms
    # perturbed so that a bias added twice (or not at all) would show.
    gpt = build(cfg, seed=a.seed).blocks[0]
    g = torch.Generator().manual_seed(a.seed + 1)
    perturb(gpt, g)
    x, w, x2 = (torch.randn(a.batch, a.seq, a.hidden, generator=g)
                .to(ctx.device, dtype) for _ in range(3))
    mesh = None
    if {"dtensor", "wrong_split"} & set(variants + llama):
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh(ctx.device.type, (tp,))
    out = {"config": vars(a), "tp": tp, "device_name": D.name(ctx.device),
           "dtype_bytes": torch.tensor([], dtype=dtype).element_size()}
    ref = reference(gpt, x, w, x2, a.step)
    out.update(lr=ref["lr"], step_effect=ref["step_effect"],
               ref_params=ref["params"], results=[run_variant(
                   v, *ref["args"], gpt_split(v, cfg, ctx, mesh, x), x, w,
                   x2, ref["lr"], ctx, a.timing_steps) for v in variants])
    if llama:   # the Llama-style block: GQA, SwiGLU, RMSNorm, RoPE
        rec = llama_record(a.hidden, a.heads, a.kv_heads, a.seq)
        block = build_arch(rec, seed=a.seed).blocks[0]
        perturb(block, g)
        # the same block in fp64: what both orders of the sums approach
        exact = reference(copy.deepcopy(block).double(), x.double(),
                          w.double(), x2.double(), a.step)["args"][2]
        ref = reference(block, x, w, x2, a.step)
        out["llama"] = {"arch": rec.as_dict(), "lr": ref["lr"],
                        "step_effect": ref["step_effect"],
                        "ref_params": ref["params"],
                        "kv_split": kv_split(rec, tp),
                        "ref_grad_diff_fp64": {
                            n: max_diff(t, exact[n], torch.float64)
                            for n, t in ref["args"][2].items()},
                        "results": [run_variant(
                            v, *ref["args"],
                            llama_split(v, rec, ctx, mesh, x), x, w, x2,
                            ref["lr"], ctx, a.timing_steps, exact)
                            for v in llama]}
    dist.save(ctx, out)
    dist.close()


def perturb(block, g) -> None:
    with torch.no_grad():
        for p in block.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g))


def reference(ref, x, w, x2, step) -> dict:
    """One process's block: its output, gradients and one SGD step."""
    ref = ref.to(device=x.device, dtype=x.dtype)
    state = copy.deepcopy(ref.state_dict())
    xr = x.clone().requires_grad_(True)
    out = ref(xr)
    (out * w).sum().backward()
    grads = {n: p.grad.clone() for n, p in ref.named_parameters()}
    lr = step_lr(state, grads, step)
    with torch.no_grad():
        before = ref(x2)
    torch.optim.SGD(ref.parameters(), lr=lr).step()
    after = {n: p.detach().clone() for n, p in ref.named_parameters()}
    with torch.no_grad():
        out2 = ref(x2)
    return {"args": (state, out.detach(), grads, xr.grad, after, out2),
            "lr": lr, "params": sum(p.numel() for p in ref.parameters()),
            "step_effect": (max_diff(out2, before)
                            / out2.float().abs().max().item())}

if __name__ == "__main__":
    main()
