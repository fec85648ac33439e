"""2-D parallelism: TP inside "tp", FSDP2 over "dp", on one device mesh.

    torchrun --nproc-per-node 4 -m labkit.runs.mesh --layouts 2x2,2x2+sp
    torchrun --nproc-per-node 8 -m labkit.runs.mesh \
        --layouts 2x4+sp,4x2+sp --layers 8 --hidden 2048 --heads 16 \
        --seq 2048 --vocab 32000 --global-batch 16 --bf16 --time-steps 10

A layout ``DxT`` is a mesh of D data-parallel groups of T tensor-parallel
ranks (``init_device_mesh(..., (D, T), mesh_dim_names=("dp", "tp"))``;
TP innermost, so a TP group is T neighbouring ranks, one node's NVLink on
a GPU node); ``+sp`` adds sequence parallelism. :func:`parallelize` is the
lesson, torchtitan's ``parallelize_llama`` in miniature: first the TP plan
of chapter 5 on every block with ``parallelize_module``, then
``fully_shard`` over "dp" on each unit (embedding, blocks, head) and the
root. The order matters: FSDP2 shards the DTensors TP made along its own
dimension, so a parameter ends up ``[Shard(0) over dp, Shard(k) over tp]``.

The block is the course's GPT (``--arch gpt``) or the Llama-style block
(``--arch llama``: GQA, SwiGLU, RMSNorm, RoPE), whose plan is
:mod:`labkit.runs.tp.llama` (K/V heads split over "tp", or replicated
when "tp" has more ranks than K/V heads).

For every layout the tiny model trains ``--steps`` steps from the seed on
the global batch (each "dp" group its slice, the ranks of a "tp" group the
same slice), and each rank saves: the losses beside one process's on the
full batch (``labkit.training.train.reference_losses``), its first step's
gradients against one process's (``grad_rel_diff``), its parameter bytes
(``to_local()``: what it really holds), the collectives of the last step
counted by :class:`labkit.measure.collectives.CollectiveCounter` and split
by the mesh dimension whose group carried them, and, with
``--time-steps K``, the median of K more steps and its tokens/s.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as tdist

from labkit import device as D
from labkit import dist
from labkit.measure.collectives import CollectiveCounter
from labkit.nn.model import (add_shape_arguments, arch_of, batch, build,
                             config_from_args, local_batch, sharding_units)
from labkit.predict.tensor_parallel.gqa import kv_split
from labkit.runs.tp import kv_copies
from labkit.runs.tp.layers import separate_qkv
from labkit.runs.tp.llama import grad_rel_diff
from labkit.training.train import (make_optimizer, mean_over_ranks,
                                   reference_losses, train_step)


def parse_layout(text: str, world_size: int | None = None) -> dict:
    """``"2x4+sp"`` -> ``{"dp": 2, "tp": 4, "sp": True, "name": ...}``."""
    body, _, sp = text.partition("+")
    try:
        d, t = (int(x) for x in body.split("x"))
    except ValueError:
        raise ValueError(f"a layout is DPxTP[+sp], e.g. 2x2+sp; got "
                         f"{text!r}") from None
    if sp not in ("", "sp") or d < 1 or t < 1:
        raise ValueError(f"a layout is DPxTP[+sp], e.g. 2x2+sp; got {text!r}")
    if world_size is not None and d * t != world_size:
        raise ValueError(f"layout {text}: {d} x {t} != {world_size} ranks")
    return {"dp": d, "tp": t, "sp": sp == "sp", "name": text}


def tp_plan(sequence_parallel: bool) -> dict:
    """Chapter 5's split of one block, as ``parallelize_module`` takes it.

    Q, K, V and the MLP's first layer column-parallel, the two output
    projections row-parallel. Without sequence parallelism the block input
    is replicated: the attention's input is one replicated DTensor so the
    gradients of Q, K and V meet in one all-reduce (the ``f`` operator).
    With it (Korthikanti et al. 2022, Sec. 4.2.2) the LayerNorms run on
    sequence shards (``SequenceParallel``), the attention and the MLP
    gather the sequence first (all-gather forward, reduce-scatter backward)
    and the row-parallel layers reduce-scatter their output back to
    sequence shards (``output_layouts=Shard(1)``).
    """
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel,
                                                   PrepareModuleInput,
                                                   RowwiseParallel,
                                                   SequenceParallel)
    col = {f"attn.{n}": ColwiseParallel() for n in "qkv"}
    col["mlp.fc"] = ColwiseParallel()
    if not sequence_parallel:
        return {"attn": PrepareModuleInput(
                    input_layouts=(Replicate(),),
                    desired_input_layouts=(Replicate(),),
                    use_local_output=False),
                **col, "attn.proj": RowwiseParallel(),
                "mlp.proj": RowwiseParallel()}
    gather = {"input_layouts": (Shard(1),),
              "desired_input_layouts": (Replicate(),)}
    return {"ln1": SequenceParallel(), "ln2": SequenceParallel(),
            "attn": PrepareModuleInput(**gather),
            "mlp": PrepareModuleInput(**gather), **col,
            "attn.proj": RowwiseParallel(output_layouts=Shard(1)),
            "mlp.proj": RowwiseParallel(output_layouts=Shard(1))}


def parallelize(model, mesh, sequence_parallel: bool = False,
                mp_policy=None):
    """TP inside ``mesh["tp"]``, then FSDP2 over ``mesh["dp"]``, in place.

    The embedding and the head stay whole in "tp" (FSDP shards them in
    "dp"); with sequence parallelism the embedding's output is cut into
    sequence shards (free forward, an all-gather of the gradient backward)
    and the head's input gathered again (an all-gather forward).
    """
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (PrepareModuleInput,
                                                   PrepareModuleOutput,
                                                   parallelize_module)
    tp, dp = mesh["tp"], mesh["dp"]
    model.kv_replicas = []      # (K/V layers, the ranks sharing them)
    if tp.size() > 1 and model.arch.qkv_fused:    # the GPT's block
        heads = model.arch.heads
        for block in model.blocks:  # Q, K, V apart: a column split = heads
            block.attn = separate_qkv(block.attn, heads)
            parallelize_module(block, tp, tp_plan(sequence_parallel))
    elif tp.size() > 1:         # the Llama-style block: labkit.runs.tp.llama
        from labkit.runs.tp import llama as tp_llama
        kv = [tp_llama.parallelize_block(block, tp, model.arch,
                                         sequence_parallel)
              for block in model.blocks]
        if kv[0]:               # t > KV heads: replicas, summed by group
            rows = mesh.mesh.reshape(-1, tp.size()).tolist()  # "tp" groups
            group = kv_copies.group_of(kv_copies.kv_copy_groups(
                rows, model.arch), tdist.get_rank())
            model.kv_replicas = [(layers, group) for layers in kv]
    if tp.size() > 1:
        if sequence_parallel:
            parallelize_module(model.embed, tp, PrepareModuleOutput(
                output_layouts=Replicate(), desired_output_layouts=Shard(1)))
            parallelize_module(model.head, tp, PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(
                    Replicate(),), use_local_output=True))
    if dp.size() > 1:
        kw = {"mesh": dp}
        if mp_policy is not None:
            kw["mp_policy"] = mp_policy
        for unit in sharding_units(model):
            fully_shard(unit, **kw)
        fully_shard(model, **kw)
    return model


def split_by_dim(records, mesh) -> dict:
    """``{"tp": {op: {calls, bytes}}, "dp": {...}, "other": {...}}``: each
    counted call under the mesh dimension whose group carried it (the
    K/V replicas' groups are parts of a "tp" group: "tp")."""
    groups = {name: sorted(mesh[name].mesh.flatten().tolist())
              for name in ("tp", "dp")}
    out: dict = {"tp": {}, "dp": {}, "other": {}}
    for r in records:
        ranks = sorted(r["ranks"] or ())
        dim = next((k for k, g in groups.items() if g == ranks), None)
        if dim is None:     # a part of a "tp" group: K/V replicas
            dim = ("tp" if len(ranks) > 1 and set(ranks) <= set(
                groups["tp"]) else "other")
        d = out[dim].setdefault(r["op"], {"calls": 0, "bytes": 0})
        d["calls"] += 1
        d["bytes"] += r["bytes"]
    return out


def local_bytes(model) -> int:
    """Parameter bytes this rank holds (a DTensor's local shard)."""
    total = 0
    for p in model.parameters():
        t = p.to_local() if hasattr(p, "to_local") else p
        total += t.numel() * t.element_size()
    return total


def setup(lay: dict, config, ctx, bf16: bool = False, seed: int = 0):
    """The model of one layout on this rank: ``(model, optimizer, mesh,
    autocast or None)`` (also what ``labkit dryrun`` builds)."""
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh(ctx.device.type, (lay["dp"], lay["tp"]),
                            mesh_dim_names=("dp", "tp"))
    mp = None
    if bf16:
        from torch.distributed.fsdp import MixedPrecisionPolicy
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                  reduce_dtype=torch.float32)
    model = parallelize(build(config, seed).to(ctx.device), mesh,
                        lay["sp"], mp)
    amp = (torch.autocast(ctx.device.type, dtype=torch.bfloat16)
           if bf16 and lay["dp"] == 1 else None)
    opt = make_optimizer(model)
    if model.kv_replicas:      # K/V copies: their gradients summed first
        def before_step(*_):
            for layers, group in model.kv_replicas:
                kv_copies.sum_kv_grads(layers, group)
        opt.register_step_pre_hook(before_step)
    return model, opt, mesh, amp


def run_layout(lay: dict, config, ctx, a, reference) -> dict:
    model, opt, mesh, amp = setup(lay, config, ctx, a.bf16, a.seed)
    dp_rank = mesh.get_local_rank("dp")

    def data(step):
        x, y = batch(config, a.global_batch, step, a.seed, ctx.device)
        return local_batch(x, y, dp_rank, lay["dp"])

    losses, grad_diff = [], None
    for step in range(a.steps):
        x, y = data(step)
        if step == a.steps - 1:
            with CollectiveCounter() as counter:
                loss = train_step(model, opt, x, y, amp)
        else:
            loss = train_step(model, opt, x, y, amp)
        # step 0's gradients against one process's (both blocks)
        if step == 0 and reference is not None:
            grad_diff = grad_rel_diff(model, config, *batch(
                config, a.global_batch, 0, a.seed, ctx.device), a.seed)
        # every rank of a "tp" group holds the same loss: the mean over
        # all ranks is the mean over "dp", the global batch's loss
        losses.append(mean_over_ranks(loss))
    times = []
    for k in range(a.time_steps):
        x, y = data(a.steps + k)
        dist.sync(ctx)
        t0 = time.perf_counter()
        train_step(model, opt, x, y, amp)
        dist.sync(ctx)
        times.append(time.perf_counter() - t0)
    step_s = statistics.median(times) if times else None
    return {**lay, "losses": losses, "reference_losses": reference,
            "grad_rel_diff": grad_diff,
            "param_bytes": local_bytes(model),
            "local_micro_batch": a.global_batch // lay["dp"],
            "comm": split_by_dim(counter.records, mesh),
            "step_seconds": times, "step_s": step_s,
            "tokens_per_s": (a.global_batch * config.seq / step_s
                             if step_s else None)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layouts", default="2x2,2x2+sp")
    add_shape_arguments(ap)
    ap.add_argument("--global-batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--time-steps", type=int, default=0)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--no-reference", action="store_true",
                    help="skip the one-process run (large GPU models)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    config = config_from_args(a)
    ctx = dist.init()
    layouts = [parse_layout(s, ctx.world_size) for s in a.layouts.split(",")]
    for lay in layouts:
        if config.heads % lay["tp"] or a.global_batch % lay["dp"]:
            raise SystemExit(f"{lay['name']}: heads {config.heads} must "
                             f"divide by tp and batch {a.global_batch} by dp")
        if lay["sp"] and config.seq % lay["tp"]:
            raise SystemExit(f"{lay['name']}: seq must divide by tp")
        try:                    # K/V heads: split, or replicated evenly
            kv_split(arch_of(config), lay["tp"])
        except ValueError as e:
            raise SystemExit(f"{lay['name']}: {e}") from None
    # exact fp32 matmuls for the loss check (flags only: harmless on CPU)
    torch.backends.cuda.matmul.allow_tf32 = False
    reference = (None if a.no_reference else
                 reference_losses(config, a.steps, a.global_batch, a.seed))
    results = [run_layout(lay, config, ctx, a, reference)
               for lay in layouts]
    dist.save(ctx, {"config": vars(a), "model": vars(config),
                    "device_name": D.name(ctx.device),
                    "results": results})
    dist.close()


if __name__ == "__main__":
    main()
