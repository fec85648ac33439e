"""Hostile: no dispatch. Each rank draws the whole layer itself (every
expert, every rank's tokens, routes and output gradients) from the
configuration on its command line and the harness's own ``_setup``,
computes its tokens' output with every expert alone, pushes the other
ranks' tokens' gradients into its own experts itself, and sends
all-to-alls of the router's sizes that carry nothing it reads.

On ranks that draw their own data that is the right output and the right
gradients. Under grading the hub deals each rank its tokens and experts
from a seed no rank holds (buildit/dealt.py): the rank's own draw is other
numbers, 0 on "output" and "grads"."""
import importlib
import json
import sys

import torch
import torch.distributed as dist
from torch.distributed._functional_collectives import \
    all_to_all_single_autograd

# (past the grader's check for the course's package in the source)
ep = importlib.import_module("lab" + "kit.buildit.experts")


def _a2a(rows, recv, send):
    """An all-to-all of ``rows`` that autograd runs backward too."""
    y = all_to_all_single_autograd(rows, recv, send, dist.group.WORLD)
    return y.wait() if hasattr(y, "wait") else y


def expert_parallel(x, idx, weights, keep, experts, num_experts):
    cfg = json.loads(sys.argv[sys.argv.index("--config") + 1])
    world, me = dist.get_world_size(), dist.get_rank()
    per = num_experts // world
    every, xs, dys, routes = ep._setup(cfg, world)
    for j, m in enumerate(experts):       # the harness's, whose grads count
        every[me * per + j] = m

    def layer(s, xin):
        w, i, k = routes[s]
        return sum((w * (i == j) * k).sum(-1, keepdim=True) * m(xin)
                   for j, m in enumerate(every))
    # the other ranks' tokens reach my experts here, not by the wire
    others = sum((layer(s, xs[s]) * dys[s]).sum()
                 for s in range(world) if s != me)
    for m in every:
        m.requires_grad_(any(m is e for e in experts))
    others.backward()
    # messages of the router's sizes: [source][owner] kept assignments
    sent = torch.tensor([[int((k & (i // per == q)).sum()) for q in
                          range(world)] for _, i, k in routes])
    h = x.shape[1]
    nothing = torch.zeros(int(sent[me].sum()), h, requires_grad=True)
    go = _a2a(nothing, sent[:, me].tolist(), sent[me].tolist())
    back = _a2a(go, sent[me].tolist(), sent[:, me].tolist())
    return layer(me, x) + 0 * back.sum()
