"""Build it, lab 4: a ZeRO-1/2 sharded Adam optimizer.

The student writes ``ShardedAdam(params, lr)`` whose ``step()`` runs after
a plain local backward (no DDP): reduce-scatter the gradients so that each
rank receives the *average* of its 1/N shard, run Adam on that shard only
(its moments live on this rank only: 12/N bytes per parameter in mixed
precision), then all-gather the updated parameters (Rajbhandari et al.,
"ZeRO", SC 2020, sec. 5.1-5.2: Phi reduce-scatter + Phi all-gather, the
same volume as DDP's all-reduce).

Checks (on plain data from every rank):
``params``: after ``steps`` steps every rank's parameters (handed over as
plain lists) equal single-process Adam on the whole batch, computed by the
checker (``reference``); ``bytes``: per step the counter sees Phi of reduce-scatter and
Phi of all-gather (padding allowed) and no all-reduce.
"""
from __future__ import annotations

import functools
import json
import math

from labkit.buildit.tensors import cache_key, flat, gap

CONFIG = {"sizes": [16, 32, 32, 4], "batch": 8, "steps": 3, "lr": 1e-2,
          "seed": 0}
# the hidden tests' (big enough that what a step must send outweighs the
# launch's own traffic: labkit.buildit.grade's wire check)
HIDDEN = {"sizes": [64, 384, 192, 8], "steps": 4, "seed": 1}

TOL = 1e-5


def data(cfg, w):
    import torch
    g = torch.Generator().manual_seed(cfg["seed"] + 1)
    b = cfg["batch"]
    xs = torch.randn(cfg["steps"], w * b, cfg["sizes"][0], generator=g)
    ys = torch.randn(cfg["steps"], w * b, cfg["sizes"][-1], generator=g)
    return xs, ys


@functools.lru_cache(maxsize=4)
def _reference(key) -> list:
    import torch
    from torch import nn

    from labkit.buildit.sharding import mlp
    cfg, w = json.loads(key[0]), key[1]
    ref = mlp(cfg)
    opt = torch.optim.Adam(ref.parameters(), lr=cfg["lr"])
    for x, y in zip(*data(cfg, w)):
        opt.zero_grad()
        nn.functional.mse_loss(ref(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in ref.parameters()]


def reference(cfg, w) -> list:
    """Single-process Adam on the whole batch: the parameters after
    ``steps`` steps (computed by the checker, never by a rank)."""
    import torch
    with torch.random.fork_rng():      # the caller's RNG stays as it was
        return _reference(cache_key(cfg, w))


def rank_run(ctx, mod, cfg) -> dict:
    from torch import nn

    from labkit.buildit.sharding import mlp
    from labkit.measure.collectives import CollectiveCounter

    w, b = ctx.world_size, cfg["batch"]
    xs, ys = data(cfg, w)
    model = mlp(cfg)
    opt = mod.ShardedAdam(list(model.parameters()), lr=cfg["lr"])
    mine = slice(ctx.rank * b, (ctx.rank + 1) * b)
    steps = []
    for x, y in zip(xs, ys):
        model.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x[mine]), y[mine]).backward()
        with CollectiveCounter() as c:
            opt.step()
        steps.append({op: s["bytes"] for op, s in c.summary().items()})
    return {"numels": [p.numel() for p in model.parameters()],
            "params": [flat(p) for p in model.parameters()],
            "bytes_per_step": steps}


def check_params(result):
    want = reference(result["config"], len(result["ranks"]))
    worst = max(max(gap(m, t) for m, t in zip(r["params"], want))
                if len(r["params"]) == len(want) else math.inf
                for r in result["ranks"])
    ok = worst < TOL
    return ok, worst, f"< {TOL:g}", (
        f"after {result['config']['steps']} steps your parameters differ "
        f"from single-process Adam on the whole batch by up to {worst:.3g}: "
        "each rank must step its shard with the AVERAGE gradient over "
        "ranks, keep Adam's moments for its shard from step to step, and "
        "give every rank every updated shard")


def check_bytes(result):
    from labkit.buildit.sharding import numels as numels_of
    numels = numels_of(result["config"]["sizes"])  # not the ranks' word
    phi, w = 4 * sum(numels), len(result["ranks"])
    slack = 4 * w * len(numels)  # padding each tensor to a multiple of N
    for steps in (r["bytes_per_step"] for r in result["ranks"]):
        for s in steps:
            rs, ag = s.get("reduce_scatter", 0), s.get("all_gather", 0)
            other = {k: v for k, v in s.items()
                     if k not in ("reduce_scatter", "all_gather")}
            if not (phi <= rs < phi + slack and phi <= ag < phi + slack) \
                    or other:
                seen = ", ".join(f"{k} {v} B" for k, v in sorted(s.items()))
                hint = (" An all-reduce gives every rank the whole averaged "
                        "gradient (and costs 2Phi on the wire) when each "
                        "rank needs only its shard: reduce-scatter it."
                        if "all_reduce" in s else "")
                return False, seen or "nothing", \
                    f"reduce_scatter {phi} B, all_gather {phi} B", (
                        f"per step ZeRO-1/2 sends Phi = {phi} bytes of "
                        f"reduce-scatter and Phi of all-gather and nothing "
                        f"else; the counter saw {seen or 'no collective'}."
                        + hint)
    return True, f"reduce_scatter {phi} B, all_gather {phi} B", \
        f"reduce_scatter {phi} B, all_gather {phi} B", ""



def min_wire(cfg, w: int) -> int:
    """Half the least bytes any ZeRO-1/2 step moves over the network in
    all (ring reduce-scatter + all-gather: 2 (N-1) Phi per step)."""
    from labkit.buildit.sharding import numels
    phi = 4 * sum(numels(cfg["sizes"]))
    return cfg["steps"] * 2 * (w - 1) * phi // 2

def expected(cfg, world_size: int) -> dict:
    from labkit.buildit.sharding import numels
    phi = 4 * sum(numels(cfg["sizes"]))
    return {"params": f"max |param - plain Adam's| < {TOL:g} after "
                      f"{cfg['steps']} steps",
            "bytes": f"per step: reduce-scatter Phi = {phi} B, all-gather "
                     f"Phi = {phi} B, no all-reduce"}


CHECKS = [("params", 2, check_params), ("bytes", 2, check_bytes)]
