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
in one process on the same ``x`` and output gradient ``dy``. Each rank's
``nn.Linear`` has the whole layer's shape, but, as on a rank of a real
tensor-parallel job, only this rank's block holds the layer's weights: the
other ranks' blocks are noise (``share``; under grading the grader's hub
deals them, from a seed no rank holds, ``labkit.buildit.dealt``). So the
whole layer's output reaches a rank only through ``g``'s all-reduce.

A second case is an attention block with a *fused* QKV projection, an
``nn.Linear(h, 3h)`` laid out ``[q; k; v]`` (GPT-2's), given to
``ColumnParallelLinear(qkv, rank, world_size, parts=3)``: the student must
keep this rank's heads of *each* of the three parts, and the harness reads
the rank's output as ``[3, heads / N, d]``. A contiguous split of the 3h
rows gives rank 0 all of Q and half of K: every shape fits and the output
is wrong (chapter 5, "The silent bug"; Megatron stores the weight
interleaved per head, ``[a, 3, d]``, so that a contiguous split is right).

Checks (plain data from every rank: its output and gradients as plain
lists, compared with the unsplit pair run by the checker, ``reference``):
``output`` equals the unsplit pair's;
``grads``: the input gradient and every weight and bias gradient equal the
matching block of the unsplit gradients; ``comm``: one all-reduce of
``tokens x hidden`` forward and one backward, nothing else; ``qkv``: the
attention block's output and input gradient equal the unsplit block's
(the hidden tests run it with more heads).
"""
from __future__ import annotations

import functools
import json
import math

from labkit.buildit.tensor_parallel_blocks import fused_block, linear, \
    pair_layers, share
from labkit.buildit.tensors import cache_key, flat, gap

CONFIG = {"hidden": 16, "tokens": 6, "heads": 2, "seed": 0}
# the hidden tests' (big enough that what a step must send outweighs the
# launch's own traffic: labkit.buildit.grade's wire check)
HIDDEN = {"hidden": 48, "tokens": 512, "heads": 4, "seed": 1}
TOL = 1e-5


def attend(fused, heads: int):
    """Softmax attention over the tokens of a [tokens, 3 * heads * d]
    projection read as [3, heads, d] (q, k, v of the same heads)."""
    import torch
    t = fused.shape[0]
    q, k, v = fused.view(t, 3, heads, -1).unbind(1)
    q, k, v = (z.transpose(0, 1) for z in (q, k, v))   # [heads, t, d]
    a = torch.softmax(q @ k.transpose(1, 2) / q.shape[-1] ** 0.5, -1)
    return (a @ v).transpose(0, 1).reshape(t, -1)


@functools.lru_cache(maxsize=4)
def _reference(key) -> dict:
    from torch import nn
    cfg = json.loads(key[0])
    full1, full2, x, dy = pair_layers(cfg)
    x = x.clone().requires_grad_()
    y = full2(nn.functional.gelu(full1(x)))
    y.backward(dy)
    qkv, proj, xa, dya = fused_block(cfg)
    xa.requires_grad_()
    ya = proj(attend(qkv(xa), cfg["heads"]))
    ya.backward(dya)
    return {"attention output": ya.detach(), "attention input": xa.grad,
            "output": y.detach(), "input": x.grad,
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

    from labkit.buildit import dealt
    from labkit.measure.collectives import CollectiveCounter

    w, r = ctx.world_size, ctx.rank
    got = dealt.mine(share(cfg, w, r))
    full1, full2 = linear(*got[0:2]), linear(*got[2:4])
    x, dy = got[4:6]
    with CollectiveCounter():     # a window of its own (``from_hub``)
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
    with CollectiveCounter():     # the fused-QKV case: one window
        attention = _rank_attention(mod, cfg, r, w, got[6:])
    grads = {"input": grad(x), "column weight": grad(col.weight),
             "column bias": grad(col.bias), "row weight": grad(row.weight),
             "row bias": grad(row.bias)}
    return {"output": [list(y.shape), flat(y)], "grads": grads,
            "forward": [(c["op"], c["bytes"]) for c in fwd.records],
            "backward": [(c["op"], c["bytes"]) for c in bwd.records],
            "attention": attention}


def from_hub(result, windows):
    """``forward`` and ``backward`` from the grader's hub
    (``labkit.buildit.counted``): the constructors', the forward's, the
    backward's and the fused case's windows."""
    from labkit.buildit.counted import windows_of
    return {**result, "ranks": [
        {**r, "forward": [c[:2] for c in w[1]],
         "backward": [c[:2] for c in w[2]]}
        for r, w in windows_of(result, windows, 4)]}


def _rank_attention(mod, cfg, r, w, got) -> dict:
    """The fused-QKV case on this rank (``got``: its share's weights,
    biases, ``x`` and ``dy``); the student's error is its own result (the
    pair's checks still grade)."""
    from labkit.runs.tools.buildit import describe
    qkv, proj, (x, dy) = linear(*got[0:2]), linear(*got[2:4]), got[4:6]
    try:
        col = mod.ColumnParallelLinear(qkv, r, w, parts=3)
        row = mod.RowParallelLinear(proj, r, w)
        x = x.clone().requires_grad_()
        y = row(attend(col(x), cfg["heads"] // w))
        y.backward(dy)
    except Exception as e:  # noqa: BLE001 - the student's error is data
        return {"error": describe(e, getattr(mod, "__file__", None) or "")}
    g = x.grad
    return {"output": [list(y.shape), flat(y)],
            "input": None if g is None else [list(g.shape), flat(g)]}


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



def check_qkv(result):
    w = len(result["ranks"])
    ref = reference(result["config"], w, 0)
    got = [r.get("attention") or {} for r in result["ranks"]]
    err = next((g["error"] for g in got if g.get("error")), None)
    worst = math.inf if err else max(
        max(_gap(g.get("output"), ref["attention output"]),
            _gap(g.get("input"), ref["attention input"])) for g in got)
    return worst < TOL, worst, f"< {TOL:g}", (
        f"ColumnParallelLinear(qkv, rank, world_size, parts=3) failed: "
        f"{err}" if err else
        f"with a fused [q; k; v] weight the attention output or input "
        f"gradient differs from the unsplit block's by up to {worst:.3g}: "
        f"keep this rank's block of EACH of the three parts (its heads' q, k "
        "and v), not a block of the 3h rows, which gives rank 0 all of q "
        "and half of k")


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
                    f"all-reduce of {b} B (f)",
            "qkv": f"fused [q; k; v], {cfg['heads']} heads: attention "
                   f"output and input gradient within {TOL:g}"}


CHECKS = [("output", 1, check_output), ("grads", 1, check_grads),
          ("comm", 1, check_comm), ("qkv", 1, check_qkv)]
