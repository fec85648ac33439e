"""Build it, lab 3: bucketed DDP that overlaps its all-reduces with backward.

The student writes ``BucketedDDP(model, bucket_cap_mb)``: gradient hooks
(``Tensor.register_post_accumulate_grad_hook``) put each gradient in its
bucket; a full bucket is all-reduced at once with ``async_op=True`` while
backward goes on; ``finish()`` waits for every handle and leaves the
averaged gradients in ``p.grad``. Buckets follow DDP's rule (Li et al.,
"PyTorch Distributed", VLDB 2020, sec. 3.2.3): walk the parameters in the
reverse of ``model.parameters()`` (the order backward produces them), add
each to the open bucket, close it once it holds at least
``bucket_cap_mb * 2**20`` bytes; the last bucket holds the rest.

Checks (on plain data from every rank):
``grads``: every rank's gradients (handed over as plain lists) equal the
single-process gradients of the whole batch, computed by the checker;
``buckets``: one all-reduce per bucket, Phi bytes in all, for every cap;
``overlap``: every bucket's all-reduce but the last starts before
backward's last matmul (from the order the counter recorded; under
grading, the order in which the grader's hub saw the all-reduces and the
harness's point as backward reached the first layer: ``from_hub``).
"""
from __future__ import annotations

import functools
import json
import math

from labkit.buildit.points import drawn, weights_found
from labkit.buildit.tensors import cache_key, flat, gap

CONFIG = {"sizes": [16, 32, 32, 32, 4], "batch": 8, "steps": 2,
          "caps_bytes": [4096, 8192], "seed": 0}
# what the hidden tests run instead: the rule, not the example
HIDDEN = {"sizes": [96, 192, 192, 192, 48], "caps_bytes": [38400, 160000],
          "seed": 1}
TOL = 1e-5
# the point the harness marks as backward reaches the first layer
LAST_MATMUL = "backward's last matmul"


def buckets(numels: list[int], cap_bytes: float, itemsize: int = 4) -> list:
    """DDP's rule: parameter indices per bucket, in backward order."""
    out, cur, size = [], [], 0
    for i in reversed(range(len(numels))):
        cur.append(i)
        size += numels[i] * itemsize
        if size >= cap_bytes:
            out.append(cur)
            cur, size = [], 0
    return out + ([cur] if cur else [])


def mlp(cfg):
    """The same small tanh MLP on every rank (``cfg["sizes"]``)."""
    import torch
    from torch import nn
    torch.manual_seed(cfg["seed"])
    s, layers = cfg["sizes"], []
    for a, b in zip(s[:-1], s[1:]):
        layers += [nn.Linear(a, b), nn.Tanh()]
    return nn.Sequential(*layers[:-1])


def data(cfg, w):
    import torch

    from labkit.buildit import dealt
    g = torch.Generator().manual_seed(dealt.seed(cfg))
    x = torch.randn(w * cfg["batch"], cfg["sizes"][0], generator=g)
    y = torch.randn(w * cfg["batch"], cfg["sizes"][-1], generator=g)
    return x, y


def share(cfg, w, r) -> list:
    """Rank ``r``'s rows of the batch (``labkit.buildit.dealt``)."""
    from labkit.buildit.dealt import part
    return part(data(cfg, w), r, cfg["batch"], 0)


@functools.lru_cache(maxsize=16)
def _reference(key, weights) -> list:
    import torch
    from torch import nn
    cfg, w = json.loads(key[0]), key[1]
    ref = mlp(cfg)
    x, y = data(cfg, w)
    if weights is not None:      # every rank's rows, by the same weights
        rows = torch.tensor(weights, dtype=torch.float32).repeat(w)

        def weigh(module, args, out) -> None:
            out.register_hook(lambda g: g * rows.view(-1, 1))
        ref[0].register_forward_hook(weigh)
    nn.functional.mse_loss(ref(x), y).backward()
    return [p.grad.detach().clone() for p in ref.parameters()]


def reference(cfg, w, weights=None) -> list:
    """The single-process gradients of the whole batch (the checker's);
    with ``weights`` (the hub's, one per row of a rank's batch), each
    rank's rows of the first layer's output gradient weighted by them,
    as the harness's point did."""
    import torch
    with torch.random.fork_rng():      # the caller's RNG stays as it was
        return _reference(cache_key(cfg, w),
                          None if weights is None else tuple(weights))


def _mark_backward_end(module, args, out) -> None:
    """A forward hook of the first layer: a point (``labkit.buildit.points``)
    as the gradient of its output arrives, before its own backward; each
    row of that gradient is multiplied by the hub's weight for it (1.0
    without a hub), which the checks find in the first layer's gradients
    (``from_hub``): its matmul sums over the rows after the point."""
    out.register_hook(_weighted)


def _weighted(g):
    import torch

    from labkit.buildit import points
    w = points.scaled(LAST_MATMUL, g.shape[0])
    return g * torch.tensor(w, dtype=g.dtype).view(-1, 1)


def rank_run(ctx, mod, cfg) -> dict:
    import torch.distributed as tdist
    from torch import nn

    from labkit.measure.collectives import CollectiveCounter

    class Timeline(CollectiveCounter):
        """The counter, plus how many matmuls had run at each collective."""

        def __init__(self):
            super().__init__()
            self.matmuls, self.at = 0, []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            n = len(self.records)
            out = super().__torch_dispatch__(func, types, args, kwargs)
            self.at += [self.matmuls] * (len(self.records) - n)
            if func._schema.name in ("aten::mm", "aten::addmm",
                                     "aten::bmm"):
                self.matmuls += 1
            return out

    from labkit.buildit import dealt
    w = ctx.world_size
    x, y = dealt.mine(share(cfg, w, ctx.rank))
    runs = []
    for cap in cfg["caps_bytes"]:
        model = mlp(cfg)
        # where backward reaches the first layer (its last matmul next),
        # for the grader's hub: ``from_hub``
        model[0].register_forward_hook(_mark_backward_end)
        with CollectiveCounter():  # a window of its own (``from_hub``)
            ddp = mod.BucketedDDP(model, cap / 2**20)
        for _ in range(cfg["steps"]):
            model.zero_grad(set_to_none=True)
            with Timeline() as t:
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
                backward_matmuls = t.matmuls
                ddp.finish()
            ar = [(r["bytes"], a) for r, a in zip(t.records, t.at)
                  if r["op"] == "all_reduce"]
            runs.append({"cap_bytes": cap,
                         "grads": [flat(p.grad) for p in model.parameters()],
                         "all_reduce_bytes": [n for n, _ in ar],
                         "matmuls_at_issue": [a for _, a in ar],
                         "backward_matmuls": backward_matmuls,
                         "other_ops": sorted({r["op"] for r in t.records}
                                             - {"all_reduce"})})
        del ddp
        tdist.barrier()
    return {"runs": runs}


def from_hub(result, windows):
    """Each run's all-reduces and other ops from the grader's hub
    (``labkit.buildit.counted``): per cap, the constructor's window, then
    one per step. Where each all-reduce was issued is the hub's too: the
    harness marks a point (``labkit.buildit.points``) as backward reaches
    the first layer, whose matmul is backward's last; ``early``: the
    step's all-reduces the hub performed before that point."""
    from labkit.buildit.counted import windows_of
    from labkit.buildit.points import of_hub
    cfg = result["config"]
    per = cfg["steps"] + 1
    pts = of_hub(result)
    sums = result["hub"].get("sumsq") or [None] * len(pts)
    ranks = []
    for (r, w), mine, sq in zip(windows_of(result, windows,
                                          len(cfg["caps_bytes"]) * per),
                                pts, sums):
        steps = [(i, win) for i, win in enumerate(w) if i % per]
        if len(r["runs"]) != len(steps):
            raise ValueError(f"{len(r['runs'])} runs, not {len(steps)}")
        runs = []
        for run, (i, win) in zip(r["runs"], steps):
            ar = [c[1] for c in win if c[0] == "all_reduce"]
            if len(ar) != len(run["matmuls_at_issue"]):
                raise ValueError("all-reduces the timeline did not see")
            at = [p for p in mine if p[1] == i + 1 and p[2] >= 0
                  and p[0] == LAST_MATMUL and len(p) == 5]
            if len(at) != 1 or len(at[0][4]) != cfg["batch"]:
                raise ValueError(f"{len(at)} marks of backward's last "
                                 "matmul in a step, weighing its rows, "
                                 "not 1")
            early = sum(c[0] == "all_reduce" for c in win[:at[0][2]])
            # the hub's weights, which the first layer's gradient carries
            runs.append({**run, "all_reduce_bytes": ar, "early": early,
                         "weights": at[0][4], "sumsq": float(sq[i]),
                         "other_ops": sorted({c[0] for c in win}
                                             - {"all_reduce"})})
        ranks.append({**r, "runs": runs})
    return {**result, "ranks": ranks}


# --------------------------------------------------------------------------
# Checks: plain data in, (passed, measured, expected, reason) out
# --------------------------------------------------------------------------

def _runs(result):
    """Every rank's runs, one per cap in the configuration (a rank's word
    on which cap it ran is not taken)."""
    caps = result["config"]["caps_bytes"]
    out = []
    for rank in result["ranks"]:
        runs = rank["runs"]
        if len(runs) != len(caps) * result["config"].get("steps", 1):
            raise ValueError("not one run per cap and step")
        for run, cap in zip(runs, [c for c in caps for _ in range(
                len(runs) // len(caps))]):
            out.append(dict(run, cap_bytes=cap))
    return out


def check_grads(result):
    cfg, w = result["config"], len(result["ranks"])
    ref = reference(cfg, w)

    def worst_of(run):
        # under the hub the first layer's carry its weights (at most 4:
        # their gap over 4 is at most the unweighted one's)
        ws = run.get("weights") if result.get("hub") is not None else None
        if len(run["grads"]) != len(ref) or ws is not None and \
                not drawn(ws):
            return math.inf
        want = ref if ws is None else reference(cfg, w, ws)[:2] + ref[2:]
        return max(gap(m, t) / (max(ws) if ws and i < 2 else 1.0)
                   for i, (m, t) in enumerate(zip(run["grads"], want)))
    worst = max(worst_of(run) for run in _runs(result))
    ok = worst < TOL
    return ok, worst, f"< {TOL:g}", (
        f"your gradients differ from the single-process gradients of the "
        f"whole batch by up to {worst:.3g}: every rank must end with the "
        "AVERAGE over ranks (all-reduce sums: divide by the world size), "
        "in every step, for every bucket")


def check_buckets(result):
    ns = numels(result["config"]["sizes"])
    phi = 4 * sum(ns)
    for run in _runs(result):
        want = len(buckets(ns, run["cap_bytes"]))
        got = len(run["all_reduce_bytes"])
        total = sum(run["all_reduce_bytes"])
        if got != want or total != phi:
            return False, f"{got} calls, {total} B", f"{want} calls, {phi} B", (
                f"with a cap of {run['cap_bytes']} bytes DDP's rule makes "
                f"{want} buckets, so {want} all-reduces carrying Phi = {phi} "
                f"bytes per step; the counter saw {got} all-reduces carrying "
                f"{total} bytes" + (
                    f" (and {', '.join(run['other_ops'])})"
                    if run["other_ops"] else "")
                + ": fill a bucket in backward order until it holds at "
                "least the cap, then send the whole bucket in one call")
    return True, "one all-reduce per bucket", "one per bucket", ""


def check_overlap(result):
    ns = numels(result["config"]["sizes"])
    hub = result.get("hub") is not None     # the hub's order, not theirs
    cfg, w = result["config"], len(result["ranks"])
    ref = reference(cfg, w) if hub else 0
    for run in _runs(result):
        weights = run.get("weights")
        if hub and not (drawn(weights) and weights_found(
                run["grads"], reference(cfg, w, weights), ref, 2,
                run["sumsq"], w)):
            return False, "a point held back", "the hub's weights", (
                "the first layer's gradient does not carry the grader's "
                "weights of its rows, answered at backward's last matmul: "
                "its point was held back past the work that follows it")
        n = len(run["matmuls_at_issue"])
        early = run["early"] if hub else sum(
            a < run["backward_matmuls"] for a in run["matmuls_at_issue"])
        # with DDP's buckets every one but the last is ready before
        # backward's last matmul; with other buckets, at least the first
        want = n - 1 if n == len(buckets(ns, run["cap_bytes"])) else 1
        if early < want:
            return False, f"{early} of {n} before backward ended", \
                f"{want} of {n}", (
                    f"with a cap of {run['cap_bytes']} bytes only {early} of "
                    f"your {n} all-reduces started before backward's last "
                    "matmul: start a bucket's all-reduce (async_op=True) in "
                    "the hook that completes it, not after backward, so "
                    "that communication hides behind the rest of backward")
    return True, "all but the last bucket before backward ended", \
        "all but the last bucket", ""


def numels(sizes: list[int]) -> list[int]:
    """Parameter sizes of ``mlp`` in ``model.parameters()`` order."""
    return [n for a, b in zip(sizes[:-1], sizes[1:]) for n in (a * b, b)]



def min_wire(cfg, w: int) -> int:
    """Half the least bytes the all-reduces move in all (a ring all-reduce
    of Phi: 2 (N-1) Phi), over every cap and step."""
    phi = 4 * sum(numels(cfg["sizes"]))
    return len(cfg["caps_bytes"]) * cfg["steps"] * 2 * (w - 1) * phi // 2

def expected(cfg, world_size: int) -> dict:
    n = numels(cfg["sizes"])
    caps = ", ".join(f"{len(buckets(n, c))} at a cap of {c} B"
                     for c in cfg["caps_bytes"])
    return {"grads": f"max |grad - single-process grad| < {TOL:g}",
            "buckets": f"all-reduces per step: {caps}; "
                       f"Phi = {4 * sum(n)} B in all",
            "overlap": "every bucket's all-reduce but the last starts "
                       "before backward's last matmul"}


CHECKS = [("grads", 2, check_grads), ("buckets", 1, check_buckets),
          ("overlap", 1, check_overlap)]
