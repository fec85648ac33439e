"""The parts of :mod:`labkit.runs.precision` that need the ranks.

    torchrun --nproc-per-node 4 -m labkit.runs.precision --parts dist

- ``fsdp2_bf16``: FSDP2 with ``MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=fp32)`` (:func:`labkit.training.wrap.wrap`), one Adam step: the
  bytes each rank holds and the bytes and dtypes through its all-gathers
  (forward) and reduce-scatters (backward), counted by
  :class:`labkit.measure.collectives.CollectiveCounter`;
- ``sharded_scaler``: the same model in fp16 (``param_dtype=fp16``) with
  ``ShardedGradScaler``: scale per step and skipped steps on every rank;
- ``all_reduce``: each rank's fp32 gradient summed over 2 and over 4
  ranks in bf16 and in fp32, against the fp64 all-reduce of the same
  vectors;
- ``fp8_all_gather``: each rank's FSDP shard of every linear weight cast
  to e4m3 (one fp32 scale per shard) and gathered as ``uint8`` (torchao
  is not installed here, so the payload is an explicit ``view(uint8)``),
  beside the bf16 all-gather of the same shards.
"""
from __future__ import annotations

import torch
import torch.distributed as tdist
import torch.nn as nn

from labkit.measure import precision as M
from labkit.measure.collectives import CollectiveCounter
from labkit.measure.memory import model_state_bytes
from labkit.nn.model import batch, build_arch
from labkit.training.wrap import wrap


def _data(a, args, ctx, step):
    import types
    shape = types.SimpleNamespace(vocab=a.vocab, seq=a.max_seq)
    x, y = batch(shape, args.micro_batch * ctx.world_size, step)
    n = args.micro_batch
    mine = slice(ctx.rank * n, (ctx.rank + 1) * n)
    return x[mine].to(ctx.device), y[mine].to(ctx.device)


def _summary(counter):
    out = {}
    for r in counter.records:
        d = out.setdefault(r["op"], {"calls": 0, "bytes": 0, "dtypes": []})
        d["calls"] += 1
        d["bytes"] += r["bytes"]
        if r["dtype"] not in d["dtypes"]:
            d["dtypes"].append(r["dtype"])
    return out


def fsdp2_bf16(a, args, ctx):
    model = wrap(build_arch(a, seed=0), "fsdp2_full", ctx, bf16=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = _data(a, args, ctx, 0)
    with CollectiveCounter() as fwd:
        loss = model(x, y)
    with CollectiveCounter() as bwd:
        loss.backward()
    grad_dtypes = sorted({str(p.grad.dtype) for p in model.parameters()})
    opt.step()
    held = model_state_bytes(model, opt)
    return model, {"held": held, "forward": _summary(fwd),
                   "backward": _summary(bwd), "grad_dtypes": grad_dtypes,
                   "param_dtypes": sorted({str(p.dtype) for p in
                                           model.parameters()}),
                   "loss": loss.item()}


def sharded_scaler(a, args, ctx):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
    from labkit.nn.model import sharding_units
    model = build_arch(a, seed=0).to(ctx.device)
    mp = MixedPrecisionPolicy(param_dtype=torch.float16,
                              reduce_dtype=torch.float32)
    for unit in sharding_units(model):
        fully_shard(unit, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = ShardedGradScaler(device=ctx.device.type,
                               init_scale=args.init_scale,
                               growth_interval=args.growth_interval)
    from labkit.runs.amp.steps import scaled_steps
    return scaled_steps(model, opt, scaler,
                        lambda s: _data(a, args, ctx, s), args.scaler_steps)


def all_reduce(model, ctx):
    """A real gradient per rank (its own batch slice), summed."""
    vec = torch.cat([p.grad.to_local().flatten().float()
                     for p in model.parameters()])
    out = []
    sizes = [n for n in (2, 4) if n <= ctx.world_size]
    for n in sizes:
        group = tdist.new_group(list(range(n)))
        if ctx.rank >= n:
            continue
        ref = vec.double().clone()
        tdist.all_reduce(ref, group=group)
        for fmt in ("bf16", "fp32"):
            t = vec.to(M.DTYPES[fmt]).clone()
            tdist.all_reduce(t, group=group)
            out.append({"format": fmt, "ranks": n,
                        "rel_error": M.rel_error(t, ref)})
    return out


def fp8_all_gather(model, ctx):
    """The linear weights' shards gathered in bf16 and as e4m3 bytes."""
    shards = [m.weight.to_local().detach() for m in model.modules()
              if isinstance(m, nn.Linear)]
    full = [m.weight.full_tensor().detach() for m in model.modules()
            if isinstance(m, nn.Linear)]
    flat16 = torch.cat([s.flatten() for s in shards]).bfloat16()
    fmax = torch.finfo(torch.float8_e4m3fn).max
    scales = torch.stack([s.abs().max().clamp(min=1e-12) / fmax
                          for s in shards]).float()
    q = torch.cat([(s / sc).to(torch.float8_e4m3fn).flatten()
                   for s, sc in zip(shards, scales)]).view(torch.uint8)
    p = ctx.world_size
    with CollectiveCounter() as c16:
        g16 = flat16.new_empty(p * flat16.numel())
        tdist.all_gather_into_tensor(g16, flat16)
    with CollectiveCounter() as c8:
        g8 = q.new_empty(p * q.numel())
        tdist.all_gather_into_tensor(g8, q)
    with CollectiveCounter() as cs:
        gs = scales.new_empty(p * scales.numel())
        tdist.all_gather_into_tensor(gs, scales)
    # read back rank by rank, tensor by tensor, and compare with the
    # full fp32 weights
    g8 = g8.view(torch.float8_e4m3fn).view(p, -1)
    g16 = g16.view(p, -1)
    gs = gs.view(p, -1)
    err8 = err16 = den = 0.0
    for r in range(p):
        off = 0
        for i, s in enumerate(shards):
            n = s.numel()
            rows = s.shape[0]
            ref = full[i][r * rows:(r + 1) * rows].double().flatten()
            d8 = g8[r, off:off + n].float().double() * gs[r, i].item()
            d16 = g16[r, off:off + n].double()
            err8 += (d8 - ref).norm().item() ** 2
            err16 += (d16 - ref).norm().item() ** 2
            den += ref.norm().item() ** 2
            off += n
    return {"bf16": _summary(c16), "fp8": _summary(c8),
            "scales": _summary(cs), "elements": flat16.numel() * p,
            "tensors": len(shards),
            "rel_error": {"bf16": (err16 / den) ** 0.5,
                          "fp8": (err8 / den) ** 0.5}}


def dist_part(a, args, ctx):
    model, rec = fsdp2_bf16(a, args, ctx)
    out = {"fsdp2_bf16": rec, "all_reduce": all_reduce(model, ctx),
           "fp8_all_gather": fp8_all_gather(model, ctx)}
    del model
    out["sharded_scaler"] = sharded_scaler(a, args, ctx)
    return out
