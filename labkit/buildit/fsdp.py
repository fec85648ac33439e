"""Build it, lab 3 (chapter 3's headline): FSDP's unit lifecycle.

The student writes ``FSDP(units, lr)`` around the model's units (each a
module with ``weight`` and ``bias``, the same full values on every rank)
and its ``step()``; the harness runs ``unit(x)`` in order, the loss and
``loss.backward()``, then ``step()``. FULL_SHARD (Zhao et al., "PyTorch
FSDP", VLDB 2023, sec. 3.2; Rajbhandari et al., "ZeRO", SC 2020, stage 3):

- each unit's parameters are flattened in ``unit.parameters()`` order into
  one vector, padded with zeros to a multiple of the world size; rank
  ``r`` keeps chunk ``r`` (``shards[u]``) and the full values are freed;
- before a unit's forward its parameters are all-gathered; after it they
  are freed; before its backward they are all-gathered again; once its
  gradients are complete they are reduce-scattered (averaged) and freed;
- ``step()`` runs SGD on this rank's shards only.

Checks (on plain data from every rank):
``params``: after ``steps`` steps the shards of every rank, put together,
equal single-process SGD on the whole batch (the checker's ``reference``);
``bytes``: per step the counter sees 2 all-gathers and 1 reduce-scatter per
unit, 2 Phi and Phi bytes (3 Phi, chapter 3), and nothing else;
``peak``: at every unit's forward and backward, the gathered parameters
alive are at most one unit plus its prefetch: the largest two neighbouring
units. "Gathered" are the storages the units compute with and those the
all-gathers write (:mod:`labkit.buildit.fsdp_units`, the probe); under
grading, the rank's memory as the grader counted it at each unit of a
bigger model (:mod:`labkit.buildit.fsdp_peak`).
"""
from __future__ import annotations

import functools
import json

from labkit.buildit.fsdp_units import (  # noqa: F401 (the formulas)
    Probe, bound, numels, padded, units)
from labkit.buildit.tensors import cache_key, flat, gap

CONFIG = {"sizes": [16, 33, 32, 31, 4], "batch": 4, "steps": 2,
          "lr": 0.1, "seed": 0}
# the hidden tests' (big enough that what a step must send outweighs the
# launch's own traffic: labkit.buildit.grade's wire check)
HIDDEN = {"sizes": [64, 193, 192, 191, 190, 8], "steps": 3, "seed": 1,
          # the grader's memory count's model (fsdp_peak): 4.2 MB units
          "probe": {"sizes": [1024] * 5 + [8]}}
TOL = 1e-5


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
    from torch import nn
    cfg, w = json.loads(key[0]), key[1]
    us = units(cfg)
    for x, y in zip(*data(cfg, w)):
        h = x
        for u in us:
            h = u(h)
        nn.functional.mse_loss(h, y).backward()
        with torch.no_grad():
            for u in us:
                for p in u.parameters():
                    p -= cfg["lr"] * p.grad
                    p.grad = None
    return [torch.cat([p.detach().flatten() for p in u.parameters()])
            for u in us]


def reference(cfg, w) -> list:
    """Single-process SGD on the whole batch: each unit's flat parameters
    after ``steps`` steps (computed by the checker, never by a rank)."""
    import torch
    with torch.random.fork_rng():      # the caller's RNG stays as it was
        return _reference(cache_key(cfg, w))


def rank_run(ctx, mod, cfg) -> dict:
    import torch.distributed as tdist
    from torch import nn
    from torch.utils._pytree import tree_leaves

    from labkit.measure.collectives import CollectiveCounter

    class Counter(CollectiveCounter):
        """The counter; what an all-gather writes is gathered too."""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            n = len(self.records)
            out = super().__torch_dispatch__(func, types, args, kwargs)
            if any(r["op"] == "all_gather" for r in self.records[n:]):
                probe.track(*tree_leaves((args[:1], out)))
            return out

    from labkit.buildit import dealt
    w = ctx.world_size
    xs, ys = dealt.mine(share(cfg, w, ctx.rank))
    probe = Probe()
    us = units(cfg, probe)
    for u in us:
        probe.track(*u.parameters())
    with CollectiveCounter():     # a window of its own (``from_hub``)
        fsdp = mod.FSDP(us, cfg["lr"])
    probe.sample("after FSDP(...)")
    steps = []
    for x, y in zip(xs, ys):
        with Counter() as c:
            h = x
            for u in us:
                h = u(h)
            nn.functional.mse_loss(h, y).backward()
            fsdp.step()
        steps.append({op: [s["calls"], s["bytes"]]
                      for op, s in c.summary().items()})
        tdist.barrier()
    out = {"shards": [flat(s) for s in fsdp.shards],
           "per_step": steps, "gathered": probe.samples}
    if cfg.get("probe"):
        from labkit.buildit.fsdp_peak import probe as grader_probe
        del fsdp, us, probe, Counter           # the checked run, released
        u = h = c = None  # noqa: F841
        grader_probe(mod, cfg, ctx.rank)
    return out


def from_hub(result, windows):
    """``per_step`` from the grader's hub (``labkit.buildit.counted``):
    the constructor's window, then one per step; with a probe
    (``fsdp_peak``) its two windows and its points, ``peak_rss``."""
    from labkit.buildit.counted import windows_of
    from labkit.buildit.fsdp_peak import peaks
    from labkit.buildit.points import of_hub
    cfg = result["config"]
    n, probe = cfg["steps"] + 1, bool(cfg.get("probe"))
    pts = of_hub(result) if probe else [None] * len(result["ranks"])
    steps = []
    for (r, w), mine in zip(windows_of(result, windows, n + 2 * probe),
                            pts):
        per = []
        if probe:       # a point out of place fails "peak" (its reason)
            try:
                got = peaks(cfg, len(result["ranks"]), n + 1, w[n + 1],
                            [p for p in mine if p[1] >= n])
            except ValueError as e:
                got = str(e)
            first = [p[3] for p in mine if p[1] >= n][:1] or [-1]
            r = {**r, "peak_rss": got, "probe_rss": first[0]}
        for win in w[1:n]:
            s: dict = {}
            for op, nbytes, *_ in win:
                calls, total = s.get(op, [0, 0])
                s[op] = [calls + 1, total + nbytes]
            per.append(s)
        steps.append({**r, "per_step": per})
    return {**result, "ranks": steps}


# --------------------------------------------------------------------------
# Checks: plain data in, (passed, measured, expected, reason) out
# --------------------------------------------------------------------------

def check_params(result):
    import torch
    cfg, ranks = result["config"], result["ranks"]
    w = len(ranks)
    want = reference(cfg, w)
    worst = 0.0
    for u, (n, pad) in enumerate(zip(numels(cfg["sizes"]),
                                     padded(cfg["sizes"], w))):
        full = torch.cat([want[u].double(), torch.zeros(pad - n,
                                                        dtype=torch.float64)])
        for r, rank in enumerate(ranks):
            shards = rank["shards"]
            mine = shards[u] if len(shards) == len(want) else None
            worst = max(worst, gap(mine, full.chunk(w)[r]))
    ok = worst < TOL
    return ok, worst, f"< {TOL:g}", (
        f"after {cfg['steps']} steps your shards differ from single-process "
        f"SGD on the whole batch by up to {worst:.3g}: shards[u] must be "
        "chunk `rank` of unit u's flat parameters (weight then bias, padded "
        "with zeros to a multiple of the world size), stepped with the "
        "AVERAGE gradient over ranks (reduce-scatter sums: divide by the "
        "world size), and the next forward must gather the stepped values")


def check_bytes(result):
    cfg, w = result["config"], len(result["ranks"])
    n_units = len(cfg["sizes"]) - 1
    phi = 4 * sum(padded(cfg["sizes"], w))
    want = {"all_gather": [2 * n_units, 2 * phi],
            "reduce_scatter": [n_units, phi]}
    for rank in result["ranks"]:
        steps = rank["per_step"]
        if len(steps) != cfg["steps"]:
            raise ValueError("not one record per step")
        for s in steps:
            if s != want:
                seen = ", ".join(f"{k} {v[0]} calls {v[1]} B"
                                 for k, v in sorted(s.items()))
                hint = (" An all-reduce gives every rank the whole averaged "
                        "gradient when it steps only its shard: "
                        "reduce-scatter it." if "all_reduce" in s else "")
                return False, seen or "nothing", _said(want), (
                    f"per step FULL_SHARD all-gathers every unit twice "
                    f"(before its forward, and again before its backward: "
                    f"2 Phi = {2 * phi} B) and reduce-scatters its gradients "
                    f"once (Phi = {phi} B), one flat call per unit; the "
                    f"counter saw {seen or 'no collective'}." + hint)
    return True, _said(want), _said(want), ""


def _said(want):
    return ", ".join(f"{k} {c} calls {b} B" for k, (c, b) in want.items())


def check_peak(result):
    if result.get("hub") is not None and result["config"].get("probe"):
        from labkit.buildit.fsdp_peak import check_peak_rss
        return check_peak_rss(result)      # the grader's count, not theirs
    cfg, w = result["config"], len(result["ranks"])
    most = bound(cfg["sizes"], w)
    n_units = len(cfg["sizes"]) - 1
    worst, where = 0, ""
    for rank in result["ranks"]:
        samples = rank["gathered"]
        if len(samples) < 1 + 2 * n_units * cfg["steps"]:
            raise ValueError("a unit ran without the probe")
        for at, nbytes in samples:
            if nbytes > worst:
                worst, where = nbytes, at
    ok = 0 < worst <= most
    return ok, f"{worst} B (at {where})", f"<= {most} B", (
        f"{worst} bytes of gathered parameters were alive ({where}, "
        f"unit numbers from 0); FULL_SHARD holds at most one unit plus the one it "
        f"prefetches ({most} B): free a unit's full parameters after its "
        "forward (and after its backward), so that nothing keeps them "
        "alive -- dropping a name is not enough while autograd saved the "
        "tensor: swap `p.data` for an empty tensor, or resize its storage "
        "to 0, and gather again before the backward")


def min_wire(cfg, w: int) -> int:
    """Half the least bytes a step's ring all-gathers and reduce-scatters
    move in all (3 (N-1) Phi), over every step."""
    phi = 4 * sum(padded(cfg["sizes"], w))
    return cfg["steps"] * 3 * (w - 1) * phi // 2


def expected(cfg, world_size: int) -> dict:
    phi = 4 * sum(padded(cfg["sizes"], world_size))
    u = len(cfg["sizes"]) - 1
    return {"params": f"max |shard - single-process SGD's| < {TOL:g} after "
                      f"{cfg['steps']} steps",
            "bytes": f"per step: {2 * u} all-gathers of 2 Phi = {2 * phi} B,"
                     f" {u} reduce-scatters of Phi = {phi} B, nothing else",
            "peak": f"gathered parameters <= "
                    f"{bound(cfg['sizes'], world_size)} B (one unit and "
                    "its prefetch)"}


CHECKS = [("params", 2, check_params), ("bytes", 1, check_bytes),
          ("peak", 1, check_peak)]
