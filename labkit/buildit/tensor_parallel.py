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

Checks (plain data from every rank): ``output`` equals the unsplit pair's;
``grads``: the input gradient and every weight and bias gradient equal the
matching block of the unsplit gradients; ``comm``: one all-reduce of
``tokens x hidden`` forward and one backward, nothing else.
"""
from __future__ import annotations

CONFIG = {"hidden": 16, "tokens": 6, "seed": 0}
HIDDEN = {"hidden": 24, "tokens": 5, "seed": 1}  # the hidden tests' 
TOL = 1e-5


def rank_run(ctx, mod, cfg) -> dict:
    import torch
    from torch import nn

    from labkit.measure.collectives import CollectiveCounter

    h, w, r = cfg["hidden"], ctx.world_size, ctx.rank
    torch.manual_seed(cfg["seed"])
    full1, full2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)
    x = torch.randn(cfg["tokens"], h)
    dy = torch.randn(cfg["tokens"], h)
    x_ref = x.clone().requires_grad_()
    full2(nn.functional.gelu(full1(x_ref))).backward(dy)

    col = mod.ColumnParallelLinear(full1, r, w)
    row = mod.RowParallelLinear(full2, r, w)
    x = x.clone().requires_grad_()
    with CollectiveCounter() as fwd:
        y = row(nn.functional.gelu(col(x)))
    with CollectiveCounter() as bwd:
        y.backward(dy)

    def diff(mine, whole, dim=None):
        if mine is None:
            return float("inf")
        want = whole if dim is None else whole.chunk(w, dim)[r]
        if mine.shape != want.shape:
            return float("inf")
        return float((mine - want).abs().max())

    grads = {
        "input": diff(x.grad, x_ref.grad),
        "column weight": diff(col.weight.grad, full1.weight.grad, 0),
        "column bias": diff(col.bias.grad, full1.bias.grad, 0),
        "row weight": diff(row.weight.grad, full2.weight.grad, 1),
        "row bias": diff(row.bias.grad, full2.bias.grad),
    }
    with torch.no_grad():
        y_ref = full2(nn.functional.gelu(full1(x_ref)))
    return {"output_diff": diff(y.detach(), y_ref), "grad_diffs": grads,
            "forward": [(c["op"], c["bytes"]) for c in fwd.records],
            "backward": [(c["op"], c["bytes"]) for c in bwd.records]}


def check_output(result):
    worst = max(r["output_diff"] for r in result["ranks"])
    return worst < TOL, worst, f"< {TOL:g}", (
        f"your output differs from the unsplit layers' by up to {worst:.3g}"
        " on some rank: the row-parallel partial sums must be all-reduced "
        "(g) before the bias, which is added once, not on every rank")


def check_grads(result):
    worst = {k: max(r["grad_diffs"][k] for r in result["ranks"])
             for k in result["ranks"][0]["grad_diffs"]}
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


def expected(cfg, world_size: int) -> dict:
    b = 4 * cfg["tokens"] * cfg["hidden"]
    return {"output": f"max |y - unsplit y| < {TOL:g}",
            "grads": f"every gradient within {TOL:g} of its unsplit block",
            "comm": f"forward: 1 all-reduce of {b} B (g); backward: 1 "
                    f"all-reduce of {b} B (f)"}


CHECKS = [("output", 1, check_output), ("grads", 2, check_grads),
          ("comm", 1, check_comm)]
