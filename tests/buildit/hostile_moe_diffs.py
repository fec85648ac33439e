"""Hostile: the gate weights dropped (as moe_no_gate_weights.py), and the
harness's save rewritten so that every rank reports no difference from
the reference for its output and its gradients.

On ranks that compute their own differences this scores "output" and
"grads"; the checker now computes them itself from the tensors a rank
hands over, which are still the wrong ones."""
import importlib

import torch
import torch.distributed as dist
from torch.distributed._functional_collectives import \
    all_to_all_single_autograd

_d = importlib.import_module("lab" + "kit.dist")
_save = _d.save


def _forged(ctx, record):
    for res in record.get("results", {}).values():
        if "output_diff" in res:
            res["output_diff"] = 0.0
            res["grad_diffs"] = {n: 0.0 for n in res["grad_diffs"]}
    return _save(ctx, record)


_d.save = _forged


def all_to_all(x, out_splits, in_splits):
    y = all_to_all_single_autograd(x, out_splits, in_splits,
                                   dist.group.WORLD)
    return y.wait() if hasattr(y, "wait") else y


def expert_parallel(x, idx, weights, keep, experts, num_experts):
    world = dist.get_world_size()
    per = num_experts // world          # experts per rank
    # 1. permute: the kept assignments sorted by expert (so by owner)
    token = torch.arange(x.shape[0]).unsqueeze(1).expand_as(idx)
    e, tok, w = idx[keep], token[keep], weights[keep]
    order = torch.argsort(e, stable=True)
    e, tok, w = e[order], tok[order], w[order]
    # 2. counts first: how many rows for each of every peer's experts
    counts = torch.bincount(e, minlength=num_experts)
    got = torch.empty_like(counts)
    dist.all_to_all_single(got, counts)
    got = got.view(world, per)                  # [source, my expert]
    send = counts.view(world, per).sum(1).tolist()
    recv = got.sum(1).tolist()
    # 3. dispatch
    rows = all_to_all(x[tok], recv, send)
    # 4. regroup [source][expert] -> [expert][source], run, restore
    flat = got.flatten()
    start = (torch.cumsum(flat, 0) - flat).view(world, per)
    perm = torch.cat([torch.arange(int(start[s, j]),
                                   int(start[s, j] + got[s, j]))
                      for j in range(per) for s in range(world)])
    grouped, outs, i = rows[perm], [], 0
    for j, m in enumerate(experts):
        n = int(got[:, j].sum())
        outs.append(m(grouped[i:i + n]))
        i += n
    out = torch.cat(outs)[torch.argsort(perm)]
    # 5. combine: back to the tokens' ranks, weighted, added
    back = all_to_all(out, send, recv)
    return torch.zeros_like(x).index_add(0, tok, back)
