"""Build it, lab 19: Muon over matrices whose rows are sharded.

The student writes ``whole_ns(rows, ns)``: ``rows`` are this rank's rows
of a matrix split by rows over the default group (rank ``r`` holds rows
``r m / N`` to ``(r + 1) m / N``, as FSDP2 shards dim 0); ``ns`` is
Newton-Schulz of a WHOLE matrix (``torch.optim.Muon``'s own). It returns
this rank's rows of ``ns`` of the whole matrix: gathered on every rank
(Liu et al. 2025, "Muon is Scalable", Sec. 2.3), or dealt to one rank
that runs ``ns`` and sends the rows back.

The harness runs ``steps`` Muon steps on several matrices (tall, wide,
square): the momentum and the update of the rank's rows are the
harness's (elementwise: they need no other rank), Newton-Schulz is the
student's ``whole_ns``. Each rank holds only its rows of every parameter
and gradient (under grading dealt by the grader's hub,
``labkit.buildit.dealt``).

Checks (on plain data from every rank):
``params``: after the steps every rank's rows equal single-process
``torch.optim.Muon`` on the whole matrices (``reference``, computed by
the checker); ``bytes``: per matrix and step the counter sees one
all-gather of the matrix (``4 m n`` bytes), or a gather of it and a
scatter or broadcast of as much, and nothing else (counted by the hub
under grading); ``whole``: ``ns`` only ever saw whole matrices.
"""
from __future__ import annotations

import functools
import json
import math

from labkit.buildit.tensors import cache_key, flat, gap

CONFIG = {"shapes": [[8, 16], [16, 8], [12, 12]], "steps": 2, "lr": 0.02,
          "seed": 0}
HIDDEN = {"shapes": [[16, 32], [32, 16], [24, 24], [8, 40]], "steps": 3,
          "seed": 1}
HIDDEN_WORLD = 4
# the rows after the steps: the same gathered matrix gives the same bf16
# iterations bit for bit; a rank that orthogonalises its own rows only is
# off by a share of lr (0.02)
TOL = 1e-5
# torch.optim.Muon's defaults (torch 2.13)
NS = {"ns_coefficients": (3.4445, -4.775, 2.0315), "ns_steps": 5,
      "eps": 1e-7}
MOMENTUM, WEIGHT_DECAY = 0.95, 0.1


def data(cfg):
    """Every matrix's initial weights and its gradient of each step."""
    import torch

    from labkit.buildit import dealt
    g = torch.Generator().manual_seed(dealt.seed(cfg))
    out = []
    for m, n in cfg["shapes"]:
        out.append(torch.randn(m, n, generator=g))
        out.append(torch.randn(cfg["steps"], m, n, generator=g))
    return out


def share(cfg, w, r) -> list:
    """Rank ``r``'s rows of every weight and gradient."""
    from labkit.buildit.dealt import part
    out = []
    for t in data(cfg):
        dim = t.dim() - 2
        out += part([t], r, t.shape[dim] // w, dim)
    return out


@functools.lru_cache(maxsize=4)
def _reference(key) -> list:
    import torch
    cfg = json.loads(key[0])
    ts = data(cfg)
    params = [torch.nn.Parameter(p.clone()) for p in ts[0::2]]
    opt = torch.optim.Muon(params, lr=cfg["lr"], momentum=MOMENTUM,
                           weight_decay=WEIGHT_DECAY)
    for s in range(cfg["steps"]):
        for p, g in zip(params, ts[1::2]):
            p.grad = g[s].clone()
        opt.step()
    return [p.detach().clone() for p in params]


def reference(cfg, w) -> list:
    """Single-process ``torch.optim.Muon`` on the whole matrices."""
    import torch
    with torch.random.fork_rng():
        return _reference(cache_key(cfg, w))


def rank_run(ctx, mod, cfg) -> dict:
    import torch
    from torch.optim._muon import _adjust_lr, _zeropower_via_newtonschulz

    from labkit.buildit import dealt
    from labkit.measure.collectives import CollectiveCounter
    mine = dealt.mine(share(cfg, ctx.world_size, ctx.rank))
    rows, grads = mine[0::2], mine[1::2]
    seen = []

    def ns(x):
        seen.append(list(x.shape))
        return _zeropower_via_newtonschulz(x, **NS)
    bufs = [torch.zeros_like(r) for r in rows]
    windows = []
    for s in range(cfg["steps"]):
        for i, (p, g) in enumerate(zip(rows, grads)):
            g = g[s]
            bufs[i].lerp_(g, 1 - MOMENTUM)
            upd = g.lerp(bufs[i], MOMENTUM).contiguous()
            with CollectiveCounter() as c:
                out = mod.whole_ns(upd, ns)
            windows.append({op: v["bytes"] for op, v in
                            c.summary().items()})
            if not isinstance(out, torch.Tensor) or out.shape != p.shape:
                raise ValueError(f"whole_ns returned "
                                 f"{getattr(out, 'shape', type(out))}, "
                                 f"not this rank's rows {list(p.shape)}")
            m, n = cfg["shapes"][i]
            p.mul_(1 - cfg["lr"] * WEIGHT_DECAY)
            p.add_(out.to(p.dtype), alpha=-_adjust_lr(cfg["lr"], None,
                                                      (m, n)))
    return {"params": [flat(p) for p in rows], "bytes": windows,
            "ns_shapes": seen}


def from_hub(result, windows):
    """The ranks' ``bytes`` from the grader's hub: one window per matrix
    and step."""
    from labkit.buildit.counted import summed, windows_of
    cfg = result["config"]
    n = cfg["steps"] * len(cfg["shapes"])
    ranks = [{**r, "bytes": [summed(w) for w in ws]}
             for r, ws in windows_of(result, windows, n)]
    return {**result, "ranks": ranks}


def check_params(result):
    cfg = result["config"]
    w = len(result["ranks"])
    want = reference(cfg, w)
    worst = 0.0
    for r, rank in enumerate(result["ranks"]):
        got = rank["params"]
        if len(got) != len(want):
            worst = math.inf
            break
        for mine, whole in zip(got, want):
            k = whole.shape[0] // w
            worst = max(worst, gap(mine, whole[r * k:(r + 1) * k]))
    return worst < TOL, worst, f"< {TOL:g}", (
        f"after {cfg['steps']} steps your rows differ from torch.optim.Muon "
        f"on the whole matrices by up to {worst:.3g}: Newton-Schulz must "
        "see the whole matrix (every rank's rows, in rank order), and each "
        "rank must keep its own rows of the result")


ALLOWED = ({"all_gather"}, {"gather", "scatter"}, {"gather", "broadcast"})


def check_bytes(result):
    cfg = result["config"]
    n = cfg["steps"] * len(cfg["shapes"])
    for rank in result["ranks"]:
        if len(rank["bytes"]) != n:
            return False, len(rank["bytes"]), n, "one window per matrix " \
                "and step: call whole_ns's collectives inside it"
        for j, seen in enumerate(rank["bytes"]):
            m, k = cfg["shapes"][j % len(cfg["shapes"])]
            full = 4 * m * k
            ok = set(seen) in ALLOWED and all(v == full
                                              for v in seen.values())
            if not ok:
                said = ", ".join(f"{o} {b} B" for o, b in
                                 sorted(seen.items())) or "nothing"
                return False, said, f"all_gather {full} B, or gather " \
                    f"{full} B + scatter/broadcast {full} B", (
                        f"for a {m} x {k} matrix the counter saw {said}: "
                        "put the matrix together once (an all-gather of "
                        "it, or a gather to one rank) and, when one rank "
                        "ran Newton-Schulz, send the rows back (scatter) "
                        "or the matrix (broadcast); nothing else")
    return True, "as allowed", "all_gather M, or gather M + scatter M", ""


def check_whole(result):
    cfg = result["config"]
    wholes = [list(s) for s in cfg["shapes"]]
    shapes = [s for r in result["ranks"] for s in r["ns_shapes"]]
    ok = bool(shapes) and all(s in wholes for s in shapes) and \
        len(shapes) >= cfg["steps"] * len(wholes)
    return ok, f"{len(shapes)} calls", "whole matrices only", (
        "ns saw " + (", ".join(sorted({str(s) for s in shapes
                                       if s not in wholes})) or
                     "too few matrices") +
        ": it orthogonalises a WHOLE matrix; on a rank's rows alone it is "
        "another matrix's result")


def expected(cfg, world_size: int) -> dict:
    shapes = ", ".join(f"{m}x{n}" for m, n in cfg["shapes"])
    return {"params": f"max |rows - torch.optim.Muon's| < {TOL:g} after "
                      f"{cfg['steps']} steps ({shapes})",
            "bytes": "per matrix and step: all_gather 4mn B, or gather "
                     "4mn B + scatter (or broadcast) 4mn B",
            "whole": "ns only ever sees whole matrices"}


CHECKS = [("params", 2, check_params), ("bytes", 1, check_bytes),
          ("whole", 1, check_whole)]
