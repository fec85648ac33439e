"""Build it, lab 13: dispatch and combine of expert parallelism.

The student writes ``expert_parallel(x, idx, weights, keep, experts,
num_experts)`` for one rank of the world (the EP group):

- ``x`` ``[T, h]``: this rank's tokens; ``idx``, ``weights``, ``keep``
  ``[T, k]``: each token's experts, gate weights, and which assignments the
  capacity kept;
- ``experts``: this rank's ``num_experts / world_size`` experts (rank ``r``
  holds experts ``r E/W .. (r+1) E/W - 1``), each a module on ``[n, h]``;
- returns ``y`` ``[T, h]``: for every token, the sum over its kept
  assignments of ``weight x expert(x)`` -- the experts living on whichever
  rank holds them.

That is: permute the kept assignments by expert, exchange the counts,
``all_to_all_single`` the rows with uneven splits (dispatch), run the local
experts, restore the order, all-to-all back (combine), weight and add
(Lepikhin et al. 2020, GShard, Sec. 2.2; chapter 13).

The harness draws the experts, tokens, router and capacity from one seed
and hands each rank its share: its tokens, their routes and output
gradients, and its experts (``share``; under grading the grader's hub
deals them from a seed no rank holds, ``labkit.buildit.dealt``, so that a
rank can reach another rank's experts only through the all-to-alls). It
counts the collectives; each rank hands over its output and gradients as
plain data, and the checker runs the whole layer for every rank's tokens
in one process as the reference (``reference``): no difference is the
rank's own word, and the rows the router sends each rank are the
reference's routes too. Checks: ``output`` equals
the reference's for this rank's tokens; ``grads``: the input gradient and
every local expert's gradients equal the reference's; ``comm``: only
all-to-alls, and the rows through them -- forward and backward -- are the
``S h`` and ``R h`` values the router's counts predict (``S`` rows this
rank keeps, ``R`` rows its experts receive).
"""
from __future__ import annotations

import functools
import json

from labkit.buildit.tensors import cache_key, flat, gap

CONFIG = {"experts": 8, "top_k": 2, "hidden": 8, "tokens": 12,
          "capacity_factor": None, "seed": 0}
HIDDEN = {"experts": 12, "top_k": 3, "hidden": 6, "tokens": 10,
          "capacity_factor": 1.0, "seed": 3}  # other E, k, and drops
TOL = 1e-5


def routing(logits, k, cap_factor):
    """Top-k softmax, renormalised; GShard's capacity per slice."""
    import math

    import torch
    t, e = logits.shape
    w, idx = logits.softmax(-1).topk(k, dim=-1)
    w = w / w.sum(-1, keepdim=True)
    keep = torch.ones_like(idx, dtype=torch.bool)
    if cap_factor is not None:
        cap = math.ceil(cap_factor * k * t / e)
        seen = [0] * e
        for j in range(k):                 # first choices first
            for i in range(t):
                ex = int(idx[i, j])
                keep[i, j] = seen[ex] < cap
                seen[ex] += 1
    return w, idx, keep


def _setup(cfg, w_):
    """The experts, tokens, output gradients and routes every rank and the
    checker draw from the seed (in this order)."""
    import torch
    from torch import nn

    from labkit.buildit import dealt
    e, k, h, t = (cfg[n] for n in ("experts", "top_k", "hidden", "tokens"))
    torch.manual_seed(dealt.seed(cfg))
    experts = nn.ModuleList(nn.Sequential(
        nn.Linear(h, 2 * h), nn.GELU(), nn.Linear(2 * h, h))
        for _ in range(e))
    xs, dys = torch.randn(w_, t, h), torch.randn(w_, t, h)
    routes = [routing(lg, k, cfg["capacity_factor"])
              for lg in torch.randn(w_, t, e)]
    return experts, xs, dys, routes


def share(cfg, w_, r) -> list:
    """Rank ``r``'s share (``labkit.buildit.dealt``), as float32 tensors:
    its experts' parameters, then its tokens, their output gradients, and
    their routes (gate weights, expert ids, kept)."""
    experts, xs, dys, routes = _setup(cfg, w_)
    w, idx, keep = routes[r]
    per = cfg["experts"] // w_
    mine = [p.detach() for j in range(r * per, (r + 1) * per)
            for p in experts[j].parameters()]
    return mine + [xs[r], dys[r], w, idx.float(), keep.float()]


@functools.lru_cache(maxsize=4)
def _reference(key):
    import torch
    cfg, w_ = json.loads(key[0]), key[1]
    experts, xs, dys, routes = _setup(cfg, w_)
    t, h = cfg["tokens"], cfg["hidden"]
    x_ref = xs.clone().requires_grad_()
    ys = []
    for s, (w, idx, keep) in enumerate(routes):
        y = torch.zeros(t, h)
        for j, m in enumerate(experts):
            gate = (w * (idx == j) * keep).sum(-1, keepdim=True)
            y = y + gate * m(x_ref[s])
        ys.append(y)
    (torch.stack(ys) * dys).sum().backward()
    per = cfg["experts"] // w_
    grads = []
    for r in range(w_):
        g = {"input": x_ref.grad[r]}
        for j in range(r * per, (r + 1) * per):
            for n, q in experts[j].named_parameters():
                g[f"expert {j} {n}"] = q.grad.detach().clone()
        grads.append(g)
    return [y.detach() for y in ys], grads, routes


def reference(cfg, w_):
    """``(ys, grads, routes)``: per rank the whole layer's output for its
    tokens and the gradients of its input and of its experts, run in one
    process by the checker (never by a rank)."""
    import torch
    with torch.random.fork_rng():      # the caller's RNG stays as it was
        return _reference(cache_key(cfg, w_))


def rank_run(ctx, mod, cfg) -> dict:
    import copy

    import torch

    from labkit.buildit import dealt
    from labkit.measure.collectives import CollectiveCounter

    e = cfg["experts"]
    w_, r = ctx.world_size, ctx.rank
    per = e // w_
    experts = _setup(cfg, w_)[0]       # the shapes
    local = type(experts)(copy.deepcopy(experts[r * per + j])
                          for j in range(per))
    got = dealt.mine(share(cfg, w_, r))
    with torch.no_grad():
        for p, t in zip(local.parameters(), got):
            p.copy_(t)
    x, dy, w, idx, keep = got[-5:]
    idx, keep = idx.long(), keep.bool()
    x = x.clone().requires_grad_()
    with CollectiveCounter() as fwd:
        y = mod.expert_parallel(x, idx.clone(), w.clone(), keep.clone(),
                                local, e)
    with CollectiveCounter() as bwd:
        y.backward(dy)
    grads = {"input": flat(x.grad)}
    for j, m in enumerate(local):
        for n, p in m.named_parameters():
            grads[f"expert {r * per + j} {n}"] = flat(p.grad)
    # the tensors themselves: the checker compares them with its own run
    return {"output": flat(y), "grads": grads,
            "forward": [(c["op"], c["dtype"], c["bytes"])
                        for c in fwd.records],
            "backward": [(c["op"], c["dtype"], c["bytes"])
                         for c in bwd.records]}


def from_hub(result, windows):
    """``forward`` and ``backward`` from the grader's hub
    (``labkit.buildit.counted``): one window each."""
    from labkit.buildit.counted import windows_of
    return {**result, "ranks": [
        {**r, "forward": [[c[0], c[2], c[1]] for c in w[0]],
         "backward": [[c[0], c[2], c[1]] for c in w[1]]}
        for r, w in windows_of(result, windows, 2)]}


def _diffs(result) -> tuple[list, list]:
    """Per rank the output's and each gradient's largest difference from
    the checker's own run (``reference``)."""
    ys, want, _ = reference(result["config"], len(result["ranks"]))
    out, grads = [], []
    for r, rank in enumerate(result["ranks"]):
        out.append(gap(rank.get("output"), ys[r]))
        mine = rank.get("grads")
        mine = mine if type(mine) is dict else {}
        grads.append({n: gap(mine.get(n), t) for n, t in want[r].items()})
    return out, grads


def check_output(result):
    worst = max(_diffs(result)[0])
    return worst < TOL, worst, f"< {TOL:g}", (
        f"your output differs from one process's by up to {worst:.3g}: "
        "each returned row must go back to its own token (restore the "
        "order before the combine all-to-all, index_add by token) and be "
        "multiplied by its gate weight; dropped assignments add nothing")


def check_grads(result):
    worst = {}
    for g in _diffs(result)[1]:
        for n, v in g.items():
            worst[n] = max(worst.get(n, 0.0), v)
    bad = {n: v for n, v in worst.items() if not v < TOL}
    return not bad, max(worst.values()), f"< {TOL:g}", (
        "these gradients differ from one process's: " + ", ".join(
            f"{n} ({v:.3g})" for n, v in list(bad.items())[:4]) +
        ". Use an all-to-all that autograd runs backward "
        "(all_to_all_single_autograd), and weight the rows")


def rows(cfg, w_) -> list:
    """Per rank ``[S, R]``: the assignments it keeps (the rows it sends)
    and those its experts receive, from the checker's routes."""
    routes = reference(cfg, w_)[2]
    per = cfg["experts"] // w_
    return [[int(routes[r][2].sum()),
             sum(int((keep & (idx // per == r)).sum())
                 for _, idx, keep in routes)] for r in range(w_)]


def check_comm(result):
    h = result["config"]["hidden"]
    counts = rows(result["config"], len(result["ranks"]))
    for r, n in zip(result["ranks"], counts):
        want = sorted(4 * h * k for k in n)
        for phase in ("forward", "backward"):
            ops = {c[0] for c in r[phase]}
            got = sorted(c[2] for c in r[phase]
                         if c[0] == "all_to_all" and c[1] == "float32")
            if ops - {"all_to_all"} or got != want:
                return False, {phase: r[phase]}, {phase: want}, (
                    f"in {phase} the counter saw {sorted(ops)} moving "
                    f"{got} bytes of rows; expert parallelism needs only "
                    f"all-to-alls, and the rows through them are the "
                    f"router's counts: {want} bytes ({n[0]} rows "
                    f"this rank keeps, {n[1]} its experts get)")
    return True, "rows = the router's counts", "rows = the router's " \
        "counts", ""


def expected(cfg, world_size: int) -> dict:
    return {"output": f"max |y - one process| < {TOL:g}",
            "grads": f"input and local expert gradients within {TOL:g}",
            "comm": "only all-to-alls; rows forward and backward = S h and "
                    "R h from the router's counts"}


CHECKS = [("output", 1, check_output), ("grads", 2, check_grads),
          ("comm", 1, check_comm)]


def min_wire(cfg, w: int) -> int:
    """Half the least bytes the all-to-alls move in all: every kept
    assignment routed to an expert on another rank crosses the wire four
    times (dispatch and combine, forward and backward), ``4 h`` bytes of
    fp32 each time. The routes are the checker's (``reference``)."""
    per, h = cfg["experts"] // w, cfg["hidden"]
    routes = reference(cfg, w)[2]
    away = sum(int((keep & (idx // per != s)).sum())
               for s, (_, idx, keep) in enumerate(routes))
    return 4 * 4 * h * away // 2
