"""Wrong: the expert outputs are not put back in source order before
the combine, so rows come back to the wrong tokens (bytes still right)."""
import torch
import torch.distributed as dist
from torch.distributed._functional_collectives import \
    all_to_all_single_autograd


def all_to_all(x, out_splits, in_splits):
    """all_to_all_single that autograd runs backward (splits swapped)."""
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
    out = torch.cat(outs)
    # 5. combine: back to the tokens' ranks, weighted, added
    back = all_to_all(out, send, recv)
    return torch.zeros_like(x).index_add(0, tok, back * w.unsqueeze(1))
