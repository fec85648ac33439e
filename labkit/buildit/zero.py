"""Build it, lab 4: ZeRO-2, a sharded Adam that frees gradients in backward.

The student writes ``ShardedAdam(params, lr)``. Each rank keeps Adam's
moments (and an fp32 master copy) for its 1/N shard only; during the plain
local backward (no DDP) it reduce-scatters each gradient as autograd
produces it (a post-accumulate-grad hook), keeps the *average* of its
shard and frees the full gradient (``p.grad = None``); ``step()`` runs Adam
on the shard and all-gathers the updated parameters (Rajbhandari et al.,
"ZeRO", SC 2020, sec. 5.1-5.2: Phi reduce-scatter + Phi all-gather, the
same volume as DDP's all-reduce; 12 Psi / N bytes of optimizer state and
2 Psi / N of gradients per rank instead of 16 Psi).

Each rank reads only its own rows of every step's batch: under grading the
grader's hub deals them (``labkit.buildit.dealt``), so that the average
gradient a rank steps with must come through the reduce-scatter. The loss
is ``LOSS_SCALE`` times the mean squared error (see there: it keeps Adam's
update a smooth function of the gradient at float32 rounding).

Checks (on plain data from every rank):
``params``: after ``steps`` steps every rank's parameters (handed over as
plain lists) equal single-process Adam on the whole batch, computed by the
checker (``reference``); ``bytes``: per step (backward + ``step()``) the
counter sees Phi of reduce-scatter and Phi of all-gather (padding allowed)
and no all-reduce; ``state``: what the optimizer keeps between steps is
the shard's (``labkit.buildit.zero_state``: measured by the harness on
ranks that count themselves, from outside by the grader's hub under
grading, where the rank's process is the student's);
``freed``: during backward every rank reduce-scatters Phi bytes of
gradients (counted by the grader's hub under grading: backward and
``step()`` are windows of their own), and the model's live gradients,
measured by the harness after every gradient's accumulation in backward,
never exceed Phi / 2 (ZeRO-2 frees each one once reduced; ZeRO-1, which
reduces in ``step()``, holds Phi at the end of backward). The first half
is what a rank cannot forge; the second (memory, like ``state``) is
measured by the harness on ranks that count themselves, and under grading
from outside, by the hub (``labkit.buildit.zero_state``).
"""
from __future__ import annotations

import functools
import json
import math

from labkit.buildit.tensors import cache_key, flat, gap
from labkit.buildit.zero_state import MEASURED, backward_held, \
    check_freed_rss, check_state, probe, probe_counts, psi_sizes, \
    state_bounds

# no layer holds more than a third of the parameters, so that a rank that
# frees each gradient once reduced stays far below Phi / 2 ("freed")
CONFIG = {"sizes": [16, 32, 32, 32, 16], "batch": 8, "steps": 3,
          "lr": 1e-2, "seed": 0}
# the hidden tests' (big enough that what a step must send outweighs the
# launch's own traffic: labkit.buildit.grade's wire check)
HIDDEN = {"sizes": [96, 192, 192, 192, 96], "steps": 4, "seed": 1,
          "probe": {"sizes": [512, 1024, 1024, 512], "steps": 2}}
# the hidden run's ranks: the probe's bounds part only from N = 3 on
HIDDEN_WORLD = 4

# The loss is LOSS_SCALE x MSE. Adam's update lr m^ / (sqrt(v^) + eps)
# (Kingma & Ba, "Adam", ICLR 2015, Algorithm 1) is lr g / (|g| + eps) at
# the first step: its slope in g peaks at lr / eps where g is near 0, so a
# rounding error d of the average gradient (the ranks sum in another order
# than one process) moves a parameter by up to lr d / eps. d grows with
# the loss's scale and eps does not: at scale 1 (gradients ~1e-2) an exact
# ZeRO was 2.9e-4 off one process's Adam on some of 200 random batches
# (emulated, 4 ranks, the HIDDEN sizes); at 1e-3, at most 8.7e-7, and at
# 1e-2 6.6e-6 (linear in the scale). Most gradients stay far above eps, so
# Adam still moves each parameter by about lr a step.
LOSS_SCALE = 1e-3
# |param - reference| after the steps: an exact ZeRO is 8.7e-7 off at
# most (above; the answer key on the grader's hub, 4 ranks, 10 dealt
# draws: 3.7e-7 to 5.4e-7), while a wrong optimizer is off by a share of
# a step, lr = 1e-2: one that sums instead of averaging, 1.2e-2 at least;
# one that forgets Adam's moments, 4.6e-2 (5 batches each)
TOL = 1e-4


def loss(model, x, y, scale: float = LOSS_SCALE):
    """What every rank and the reference differentiate."""
    from torch import nn
    return scale * nn.functional.mse_loss(model(x), y)


def data(cfg, w):
    import torch

    from labkit.buildit import dealt
    g = torch.Generator().manual_seed(dealt.seed(cfg))
    b = cfg["batch"]
    xs = torch.randn(cfg["steps"], w * b, cfg["sizes"][0], generator=g)
    ys = torch.randn(cfg["steps"], w * b, cfg["sizes"][-1], generator=g)
    return xs, ys


def share(cfg, w, r) -> list:
    """Rank ``r``'s rows of every step's batch (``labkit.buildit.dealt``)."""
    from labkit.buildit.dealt import part
    return part(data(cfg, w), r, cfg["batch"], 1)


@functools.lru_cache(maxsize=4)
def _reference(key) -> list:
    import torch

    from labkit.buildit.sharding import mlp
    cfg, w = json.loads(key[0]), key[1]
    ref = mlp(cfg)
    opt = torch.optim.Adam(ref.parameters(), lr=cfg["lr"])
    for x, y in zip(*data(cfg, w)):
        opt.zero_grad()
        loss(ref, x, y).backward()
        opt.step()
    return [p.detach().clone() for p in ref.parameters()]


def reference(cfg, w) -> list:
    """Single-process Adam on the whole batch: the parameters after
    ``steps`` steps (computed by the checker, never by a rank)."""
    import torch
    with torch.random.fork_rng():      # the caller's RNG stays as it was
        return _reference(cache_key(cfg, w))


def rank_run(ctx, mod, cfg) -> dict:
    from labkit.buildit import dealt
    from labkit.buildit.kept import kept_bytes
    from labkit.buildit.sharding import mlp
    from labkit.measure.collectives import CollectiveCounter

    xs, ys = dealt.mine(share(cfg, ctx.world_size, ctx.rank))
    model = mlp(cfg)
    params = list(model.parameters())
    with CollectiveCounter():   # a window of its own (``from_hub``)
        opt = mod.ShardedAdam(params, lr=cfg["lr"])
    live = []     # the model's gradient bytes after each accumulation

    def count(_):
        live.append(sum(4 * p.grad.numel() for p in params
                        if p.grad is not None))
    # registered after the student's hooks: they run after them
    for p in params:
        p.register_post_accumulate_grad_hook(count)
    steps, peaks, in_backward = [], [], []
    for x, y in zip(xs, ys):
        model.zero_grad(set_to_none=True)
        live.clear()
        # two windows a step: backward, then step() (``from_hub``)
        with CollectiveCounter() as c:
            loss(model, x, y).backward()
        with CollectiveCounter() as s:
            opt.step()
        back = {op: v["bytes"] for op, v in c.summary().items()}
        in_backward.append(back)
        steps.append(_merged(back, {op: v["bytes"] for op, v in
                                    s.summary().items()}))
        peaks.append(max(live, default=0))
    kept = kept_bytes([opt, vars(mod)], skip=params + [p.grad for p in
                                                       params],
                      home=getattr(mod, "__name__", None))
    out = {"numels": [p.numel() for p in params],
           "params": [flat(p) for p in params],
           "bytes_per_step": steps, "backward_bytes_per_step": in_backward,
           "grad_peak_per_step": peaks, "state_bytes": kept}
    if cfg.get("probe"):
        del model, params, opt, count, p      # the checked run, released
        probe(mod, cfg, ctx.rank)
    return out


def _merged(a: dict, b: dict) -> dict:
    return {k: a.get(k, 0) + b.get(k, 0) for k in {**a, **b}}


def from_hub(result, windows):
    """The ranks' ``bytes_per_step`` and ``backward_bytes_per_step`` from
    the grader's hub (``labkit.buildit.counted``): its windows are the
    constructor's, then two per step (backward, ``step()``)."""
    from labkit.buildit.counted import summed, windows_of
    cfg = result["config"]
    steps, p = cfg["steps"], cfg.get("probe")
    n = 2 * steps + 1 + (2 * p["steps"] + 3 if p else 0)
    rss = result["hub"].get("rss") if p else None
    ranks = []
    for i, (r, every) in enumerate(windows_of(result, windows, n)):
        w = every[:2 * steps + 1]
        out = {k: v for k, v in r.items() if k not in MEASURED}  # ours
        out = {**out, "bytes_per_step": [_merged(summed(b), summed(s))
                                       for b, s in zip(w[1::2], w[2::2])],
               "backward_bytes_per_step": [summed(b) for b in w[1::2]]}
        if rss is not None:
            out.update(probe_counts(rss[i], steps, p["steps"]))
            calls = result["hub"].get("call_rss")
            if calls is not None:         # the hub's reading at each call
                out["held_rss_per_step"] = backward_held(
                    cfg, len(result["ranks"]), rss[i], calls[i], every)
        ranks.append(out)
    return {**result, "ranks": ranks}


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
                        f"per step ZeRO-2 sends Phi = {phi} bytes of "
                        f"reduce-scatter and Phi of all-gather and nothing "
                        f"else; the counter saw {seen or 'no collective'}."
                        + hint)
    return True, f"reduce_scatter {phi} B, all_gather {phi} B", \
        f"reduce_scatter {phi} B, all_gather {phi} B", ""


def check_freed(result):
    phi = 4 * psi_sizes(result["config"], len(result["ranks"]))[0]
    # what the grader's hub counted in backward (a rank's word without a
    # hub): no gradient is freed in backward before its shard is reduced
    early = min(min(s.get("reduce_scatter", 0) for s in
                    r["backward_bytes_per_step"]) for r in result["ranks"])
    if early < phi:
        return False, f"reduce_scatter {early} B in backward", \
            f">= Phi = {phi} B in backward", (
                f"your ranks reduce-scattered {early} B of the Phi = {phi} B "
                "of gradients during backward (the grader counted): ZeRO-2 "
                "reduce-scatters each gradient as backward produces it "
                "(p.register_post_accumulate_grad_hook), so that it can "
                "free it there; ZeRO-1 waits for step()")
    if result.get("hub") is not None and result["config"].get("probe"):
        return check_freed_rss(result)     # the grader's count, not live
    worst = max(max(r["grad_peak_per_step"]) for r in result["ranks"])
    return worst <= phi // 2, worst, f"<= Phi / 2 = {phi // 2} B", (
        f"during backward the model held up to {worst} B of gradients at "
        f"once (Phi = {phi} B): ZeRO-2 reduce-scatters each gradient as "
        "backward produces it (p.register_post_accumulate_grad_hook), "
        "keeps its shard and frees it (p.grad = None), so that the whole "
        "gradient never lives on a rank; ZeRO-1 keeps it until step()")


def min_wire(cfg, w: int) -> int:
    """Half the least bytes any ZeRO step moves over the network in
    all (ring reduce-scatter + all-gather: 2 (N-1) Phi per step)."""
    from labkit.buildit.sharding import numels
    phi = 4 * sum(numels(cfg["sizes"]))
    return cfg["steps"] * 2 * (w - 1) * phi // 2


def expected(cfg, world_size: int) -> dict:
    from labkit.buildit.sharding import numels
    phi = 4 * sum(numels(cfg["sizes"]))
    psi = psi_sizes(cfg, world_size)[0]
    low, high = state_bounds(cfg, world_size)
    return {"params": f"max |param - plain Adam's| < {TOL:g} after "
                      f"{cfg['steps']} steps",
            "bytes": f"per step: reduce-scatter Phi = {phi} B, all-gather "
                     f"Phi = {phi} B, no all-reduce",
            "state": f"kept between steps: {low} to {high} B per rank "
                     f"(Adam's moments and fp32 master for 1/N; full "
                     f"Adam: {8 * psi} B)",
            "freed": f"reduce-scatter Phi = {phi} B during backward; "
                     f"live gradients during backward <= Phi / 2 = "
                     f"{phi // 2} B (ZeRO-1: Phi at the end)"}


CHECKS = [("params", 1, check_params), ("bytes", 1, check_bytes),
          ("state", 1, check_state), ("freed", 1, check_freed)]
