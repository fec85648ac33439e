"""Build it, lab 5: column- and row-parallel linears with the f and g operators.

The student writes ``ColumnParallelLinear(full, rank, world_size)`` and
``RowParallelLinear(full, rank, world_size)``, each built from a whole
``nn.Linear`` and keeping this rank's block as ``self.weight`` and
``self.bias`` (Shoeybi et al., "Megatron-LM", 2019, sec. 3, Fig. 3):

- column-parallel keeps a block of the *output* features; its input passes
  through ``f`` (identity forward, all-reduce of the gradient backward);
- row-parallel keeps a block of the *input* features, and its partial
  outputs go through ``g`` (all-reduce forward, identity backward) before
  the whole bias is added once.

The harness runs ``row(gelu(col(x)))`` on every rank and the unsplit pair
in one process on the same ``x`` and output gradient ``dy``.

Checks (plain data from every rank: its output and gradients as plain
lists, compared with the unsplit pair run by the checker, ``reference``):
``output`` equals the unsplit pair's;
``grads``: the input gradient and every weight and bias gradient equal the
matching block of the unsplit gradients; ``comm``: one all-reduce of
``tokens x hidden`` forward and one backward, nothing else.
"""
from __future__ import annotations

import functools
import json
import math

from labkit.buildit.tensors import cache_key, flat, gap

CONFIG = {"hidden": 16, "tokens": 6, "seed": 0}
# the hidden tests' (big enough that what a step must send outweighs the
# launch's own traffic: labkit.buildit.grade's wire check)
HIDDEN = {"hidden": 48, "tokens": 512, "seed": 1}
TOL = 1e-5


def _pair(cfg):
    import torch
    from torch import nn
    h = cfg["hidden"]
    torch.manual_seed(cfg["seed"])
    full1, full2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)
    x = torch.randn(cfg["tokens"], h)
    dy = torch.randn(cfg["tokens"], h)
    return full1, full2, x, dy


@functools.lru_cache(maxsize=4)
def _reference(key) -> dict:
    from torch import nn
    cfg = json.loads(key[0])
    full1, full2, x, dy = _pair(cfg)
    x = x.clone().requires_grad_()
    y = full2(nn.functional.gelu(full1(x)))
    y.backward(dy)
    return {"output": y.detach(), "input": x.grad,
            "column weight": full1.weight.grad,
            "column bias": full1.bias.grad,
            "row weight": full2.weight.grad, "row bias": full2.bias.grad}


# the dimension each gradient is split along (None: whole on every rank)
SPLIT = {"input": None, "column weight": 0, "column bias": 0,
         "row weight": 1, "row bias": None}


def reference(cfg, w, r) -> dict:
    """The unsplit pair's output and rank ``r``'s blocks of its gradients
    (computed by the checker, never by a rank)."""
    import torch
    with torch.random.fork_rng():      # the caller's RNG stays as it was
        ref = _reference(cache_key(cfg, w))
    return {k: v if SPLIT.get(k) is None else v.chunk(w, SPLIT[k])[r]
            for k, v in ref.items()}


def rank_run(ctx, mod, cfg) -> dict:
    from torch import nn

    from labkit.measure.collectives import CollectiveCounter

    w, r = ctx.world_size, ctx.rank
    full1, full2, x, dy = _pair(cfg)
    col = mod.ColumnParallelLinear(full1, r, w)
    row = mod.RowParallelLinear(full2, r, w)
    x = x.clone().requires_grad_()
    with CollectiveCounter() as fwd:
        y = row(nn.functional.gelu(col(x)))
    with CollectiveCounter() as bwd:
        y.backward(dy)

    def grad(p):
        g = getattr(p, "grad", None)
        return None if g is None else [list(g.shape), flat(g)]
    grads = {"input": grad(x), "column weight": grad(col.weight),
             "column bias": grad(col.bias), "row weight": grad(row.weight),
             "row bias": grad(row.bias)}
    return {"output": [list(y.shape), flat(y)], "grads": grads,
            "forward": [(c["op"], c["bytes"]) for c in fwd.records],
            "backward": [(c["op"], c["bytes"]) for c in bwd.records]}


def _gap(mine, want) -> float:
    """``mine`` = [shape, values] from a rank."""
    if type(mine) is not list or len(mine) != 2 or \
            mine[0] != list(want.shape):
        return math.inf
    return gap(mine[1], want)


def _worst(result, key) -> float:
    w = len(result["ranks"])
    return max(_gap(rank["output"] if key == "output" else
                    rank["grads"].get(key),
                    reference(result["config"], w, r)[key])
               for r, rank in enumerate(result["ranks"]))


def check_output(result):
    worst = _worst(result, "output")
    return worst < TOL, worst, f"< {TOL:g}", (
        f"your output differs from the unsplit layers' by up to {worst:.3g}"
        " on some rank: the row-parallel partial sums must be all-reduced "
        "(g) before the bias, which is added once, not on every rank")


def check_grads(result):
    worst = {k: _worst(result, k) for k in SPLIT}
    bad = {k: v for k, v in worst.items() if not v < TOL}
    return not bad, max(worst.values()), f"< {TOL:g}", (
        "these gradients differ from the matching block of the unsplit "
        "layers' gradients: " + ", ".join(f"{k} ({v:.3g})"
                                          for k, v in bad.items())
        + ". The input gradient must be summed over ranks in backward (f), "
        "and g's backward passes the gradient through unchanged")


def check_comm(result):
    cfg = result["config"]
    want = [["all_reduce", 4 * cfg["tokens"] * cfg["hidden"]]]
    for r in result["ranks"]:
        fwd = [list(c) for c in r["forward"]]
        bwd = [list(c) for c in r["backward"]]
        if fwd != want or bwd != want:
            return False, {"forward": fwd, "backward": bwd}, \
                {"forward": want, "backward": want}, (
                    f"a column + row pair needs exactly one all-reduce of "
                    f"the {want[0][1]}-byte output in forward (g) and one of "
                    f"the input gradient in backward (f); the counter saw "
                    f"{len(fwd)} collective(s) in forward "
                    f"{[c[0] for c in fwd]} and {len(bwd)} in backward "
                    f"{[c[0] for c in bwd]}")
    return True, "1 forward, 1 backward", "1 forward, 1 backward", ""



def min_wire(cfg, w: int) -> int:
    """Half the least bytes f and g move (two all-reduces of B bytes:
    2 (N-1) B each)."""
    b = 4 * cfg["tokens"] * cfg["hidden"]
    return 2 * 2 * (w - 1) * b // 2

def expected(cfg, world_size: int) -> dict:
    b = 4 * cfg["tokens"] * cfg["hidden"]
    return {"output": f"max |y - unsplit y| < {TOL:g}",
            "grads": f"every gradient within {TOL:g} of its unsplit block",
            "comm": f"forward: 1 all-reduce of {b} B (g); backward: 1 "
                    f"all-reduce of {b} B (f)"}


CHECKS = [("output", 1, check_output), ("grads", 2, check_grads),
          ("comm", 1, check_comm)]
