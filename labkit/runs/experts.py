"""Expert parallelism on real ranks, checked against one process.

    torchrun --nproc-per-node 4 -m labkit.runs.experts --ep 2 \
        --experts 4 --top-k 2 --capacity-factors none,1.0,1.25,2.0

The world of ``W`` ranks is a ``dp x ep`` mesh (``ep`` the inner dim).
Every rank builds the same decoder with MoE blocks (:mod:`labkit.nn.moe`)
from the seed; each block's MoE keeps only its EP rank's experts
(:class:`labkit.nn.moe.expert_parallel.ExpertParallelMoE`). The dense part
(embedding, attention, router, shared MLP, head) is plain DDP over all
``W`` ranks, with the experts hidden from it; an expert's gradient is
summed over the ``dp`` group only -- its replicas -- and divided by ``W``,
since every rank's loss is a mean over its own tokens.

The one-process reference is the same model, whole, run on every rank's
slice of the global batch in turn (the router and the capacity act per
rank, as GShard's groups do), the losses averaged. For each capacity
factor each rank saves: the largest differences of its logits, its dense
gradients and its experts' gradients to the reference; per layer the
router's own counts (routed and kept, per expert, on every EP peer) and
the bytes through every all-to-all, forward and backward
(:class:`labkit.measure.collectives.CollectiveCounter`); the bytes one
dropless forward keeps for backward, per rank, with the rows each layer
sent and received. Then ``--steps``
Adam steps with the aux loss off and on record the per-expert load, and
the last step the model states the rank holds (weights, gradients, Adam's
two moments: :func:`states`).
"""
from __future__ import annotations

import argparse
import copy
import os

import torch
import torch.distributed as tdist
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.parallel import DistributedDataParallel as DDP

from labkit import arch, dist
from labkit.measure import activations_moe as MM
from labkit.measure.collectives import CollectiveCounter
from labkit.nn.model import GPTConfig, batch, build_arch, local_batch
from labkit.nn.moe.expert_parallel import ExpertParallelMoE, expert_parameters
from labkit.nn.moe.layer import moe_blocks, total_aux_loss
from labkit.predict import experts as X


def record(a: argparse.Namespace):
    return arch.preset("llama-tiny").with_(
        layers=a.layers, hidden=a.hidden, heads=a.heads,
        kv_heads=a.heads // 2, vocab=a.vocab, max_seq=a.seq,
        experts=a.experts, top_k=a.top_k, expert_ffn=a.expert_ffn,
        ffn=a.expert_ffn * 2, shared_experts=a.shared,
        first_dense_layers=a.first_dense, name="moe-tiny")


def set_capacity(model, factor) -> None:
    for m in moe_blocks(model):
        m.capacity_factor = factor


def parallel(base, ep_group, layer=ExpertParallelMoE, copy_base=True):
    """A copy of ``base`` whose MoE layers keep only this EP rank's
    experts (``layer``: the dry run passes its even-routing twin)."""
    m = copy.deepcopy(base) if copy_base else base
    for b in m.blocks:
        if hasattr(b.mlp, "experts"):
            b.mlp = layer(b.mlp, ep_group)
    DDP._set_params_and_buffers_to_ignore_for_model(
        m, [n for n, _ in expert_parameters(m)])
    return m


def reduce_expert_grads(model, dp_group, world: int) -> None:
    for _, p in expert_parameters(model):
        tdist.all_reduce(p.grad, group=dp_group)
        p.grad /= world


def reference(base, slices, aux: float):
    """Losses averaged over every rank's slice; per slice the logits and
    each layer's router stats."""
    ref = copy.deepcopy(base)
    loss, logits, stats = 0, [], []
    for x, y in slices:
        out = ref(x).float()
        ce = torch.nn.functional.cross_entropy(out.flatten(0, 1),
                                               y.flatten())
        loss = loss + ce + aux * total_aux_loss(ref)
        logits.append(out.detach())
        stats.append([dict(m.stats) for m in moe_blocks(ref)])
    (loss / len(slices)).backward()
    return ref, logits, stats


def a2a(records) -> list:
    return [r for r in records if r["op"] == "all_to_all"]


def compare(factor, base, ctx, mesh, a, c):
    W, ep = ctx.world_size, a.ep
    x, y = batch(c, a.batch, 0, a.seed, device=ctx.device)
    slices = [local_batch(x, y, r, W) for r in range(W)]
    set_capacity(base, factor)
    ref, ref_logits, ref_stats = reference(base, slices, a.aux)
    model = DDP(parallel(base, mesh.get_group("ep")))
    xs, ys = slices[ctx.rank]
    with CollectiveCounter() as fwd:
        out = model(xs).float()
        loss = torch.nn.functional.cross_entropy(out.flatten(0, 1),
                                                 ys.flatten())
        loss = loss + a.aux * total_aux_loss(model.module)
    with CollectiveCounter() as bwd:
        loss.backward()
        reduce_expert_grads(model.module, mesh.get_group("dp"), W)
    ref_params = dict(ref.named_parameters())
    dense, expert = 0.0, 0.0
    for n, p in model.module.named_parameters():
        if ".mlp.experts." in n:
            blk = int(n.split(".")[1])
            j = int(n.split(".mlp.experts.")[1].split(".")[0])
            layer = model.module.blocks[blk].mlp
            rn = n.replace(f".mlp.experts.{j}.",
                           f".mlp.experts.{layer.first + j}.")
            expert = max(expert, (p.grad - ref_params[rn].grad).abs()
                         .max().item())
        else:
            dense = max(dense, (p.grad - ref_params[n].grad).abs()
                        .max().item())
    group = [ctx.rank - ctx.rank % ep + i for i in range(ep)]  # EP peers
    layers = []
    f, b = a2a(fwd.records), a2a(bwd.records)
    nl = len(moe_blocks(base))
    for i in range(nl):
        rows = [r["bytes"] for r in f[3 * i:3 * i + 3]]
        back = [r["bytes"] for r in b[2 * (nl - 1 - i):2 * (nl - i)]]
        layers.append({
            "routed": [ref_stats[r][i]["routed"] for r in group],
            "kept": [ref_stats[r][i]["kept"] for r in group],
            "capacity": ref_stats[ctx.rank][i]["capacity"],
            "tokens": ref_stats[ctx.rank][i]["tokens"],
            "measured": {"counts": rows[0], "dispatch_forward": rows[1],
                         "combine_forward": rows[2],
                         "combine_backward": back[0],
                         "dispatch_backward": back[1]},
            "ep_routed_kept_here": moe_blocks(model.module)[i]
            .stats["kept"]})
    return {"capacity_factor": factor,
            "out_diff": (out.detach() - ref_logits[ctx.rank]).abs().max()
            .item(), "scale": ref_logits[ctx.rank].abs().max().item(),
            "dense_grad_diff": dense, "expert_grad_diff": expert,
            "loss": loss.item(), "layers": layers,
            "other_collectives": sorted({r["op"] for r in bwd.records}
                                        - {"all_to_all"})}


def activations(base, ctx, mesh, a, c) -> dict:
    """What one dropless forward keeps for backward on this rank, the EP
    model's (:mod:`labkit.measure.activations_moe`), with each layer's
    sent and received rows: the ledger's input
    (:func:`labkit.predict.activations.moe.ep_decoder_saved`)."""
    set_capacity(base, None)
    model = parallel(base, mesh.get_group("ep"))
    xs, ys = local_batch(*batch(c, a.batch, 0, a.seed, device=ctx.device),
                         ctx.rank, ctx.world_size)
    got = MM.measure(model, xs, ys)
    got["loss"].backward()            # the collectives of backward too
    return {"total": got["total"], "tensors": got["tensors"],
            "micro_batch": xs.shape[0],
            "routed": [(sum(m.stats["kept"]), m.stats["received"])
                       for m in moe_blocks(model)]}


def states(model, opt) -> dict:
    """Bytes of the weights, gradients and Adam moments this rank holds
    (the ledger's three terms; Adam's scalar ``step`` aside)."""
    size = lambda t: t.numel() * t.element_size()
    ps = list(model.parameters())
    return {"params": sum(size(p) for p in ps),
            "grads": sum(size(p.grad) for p in ps if p.grad is not None),
            "optimizer": sum(size(st[k]) for st in opt.state.values()
                             for k in ("exp_avg", "exp_avg_sq")
                             if k in st),
            "numel": sum(p.numel() for p in ps)}


def balance(base, ctx, mesh, a, c, aux: float) -> list:
    """Per step: every layer's per-expert load over the whole world, on
    one fixed held-out batch (a new batch each step would add its own
    sampling noise to the trend)."""
    set_capacity(base, None)
    model = DDP(parallel(base, mesh.get_group("ep")))
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    loads = []
    held_out = local_batch(*batch(c, a.batch, 10**6, a.seed,
                                  device=ctx.device), ctx.rank,
                           ctx.world_size)[0]
    for step in range(a.steps):
        xs, ys = local_batch(*batch(c, a.batch, step, a.seed,
                                    device=ctx.device), ctx.rank,
                             ctx.world_size)
        out = model(xs).float()
        loss = torch.nn.functional.cross_entropy(out.flatten(0, 1),
                                                 ys.flatten())
        (loss + aux * total_aux_loss(model.module)).backward()
        reduce_expert_grads(model.module, mesh.get_group("dp"),
                            ctx.world_size)
        opt.step()
        held = states(model.module, opt)
        opt.zero_grad()
        with torch.no_grad():         # the load on one fixed batch
            model(held_out)
        load = torch.tensor([m.stats["routed"]
                             for m in moe_blocks(model.module)],
                            device=ctx.device)
        tdist.all_reduce(load)
        loads.append({"loss": loss.item(), "load": load.tolist(),
                      "states": held})
    return loads


def factors(text: str) -> list:
    return [None if t.strip().lower() == "none" else float(t)
            for t in text.split(",")]


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k, v in dict(ep=2, experts=4, top_k=2, layers=2, hidden=32,
                     heads=4, expert_ffn=32, vocab=64, seq=16, batch=8,
                     shared=0, first_dense=0, steps=6, seed=0).items():
        ap.add_argument(f"--{k.replace('_', '-')}", type=int, default=v)
    ap.add_argument("--capacity-factors", type=factors,
                    default=[None, 1.0, 1.25, 2.0])
    ap.add_argument("--aux", type=float, default=0.01)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--bf16", action="store_true")
    return ap


def main(argv=None):
    a = parser().parse_args(argv)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    try:
        X.check(a.experts, a.top_k, a.ep, world, a.capacity_factors)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    ctx = dist.init()
    torch.manual_seed(a.seed)
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size // a.ep, a.ep),
                            mesh_dim_names=("dp", "ep"))
    c = GPTConfig(vocab=a.vocab, seq=a.seq)
    base = build_arch(record(a), seed=a.seed).to(
        ctx.device, torch.bfloat16 if a.bf16 else torch.float32)
    results = [compare(f, base, ctx, mesh, a, c)
               for f in a.capacity_factors]
    act = activations(base, ctx, mesh, a, c)
    loads = {str(aux): balance(base, ctx, mesh, a, c, aux)
             for aux in (0.0, a.aux)} if a.steps else {}
    dist.save(ctx, {"config": {**vars(a), "world": ctx.world_size},
                    "results": results, "balance": loads,
                    "activations": act})
    dist.close()


if __name__ == "__main__":
    main()
