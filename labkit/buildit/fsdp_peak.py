"""Build it, lab 3: FSDP's peak, counted by the grader from outside a rank.

    probe(mod, cfg, rank)        # rank side, the hidden run's only
    peaks(cfg, w, window, calls, pts)  # a rank's growth at each point
    check_peak_rss(result)       # labkit.buildit.fsdp's "peak", graded

On ranks that count themselves (the notebook's run) the peak is the
probe's (``labkit.buildit.fsdp_units``): the storages the units compute
with, weighed in the rank's own process, which imports the student's
code and so can rewrite the weighing. Under grading the grader counts
the memory itself:

``probe`` (after the checked steps): a point (``labkit.buildit.points``)
before the probe's model exists, then the student's ``FSDP`` over four
units of 4.2 MB (``HIDDEN["probe"]``) and one forward and backward in a
counting window of its own, the harness's layer marking a point as it
computes each unit (``forward u``, ``backward u``). At each point the
grader's hub reads the rank's memory (scripts/grading/memory.py); the
growth since the first point is what the rank holds then: FULL_SHARD's
shards (Phi / N), at most one gathered unit and its prefetch
(``fsdp.bound``) and, in backward, the averaged gradient shards of the
units already reduced. A gathered unit never freed, a cache of the
all-gathers' outputs or a full gradient kept is a unit's 4.2 MB more.
Each point must also follow its unit's all-gather in the hub's count
(one for ``forward u`` and the units before, again for backward), so a
rank that marks the points itself, early, is refused.
"""
from __future__ import annotations

# what a rank's memory count moves by itself between two points
RSS_NOISE = 1 << 20
# the point before the probe's model exists: the growth's zero
BASE = "before the model"


def names(n_units: int) -> list[str]:
    """The points of the probe, in the order the run marks them."""
    return [BASE] + [f"forward {u}" for u in range(n_units)] + [
        f"backward {u}" for u in reversed(range(n_units))]


def allowed(cfg, w: int) -> list[int]:
    """Bytes a FULL_SHARD rank may hold at each point but the first:
    its shards, one unit and its prefetch, the gradient shards of the
    units reduced before (in backward), and the count's noise."""
    from labkit.buildit.fsdp_units import bound, padded
    sizes = cfg["probe"]["sizes"]
    pads = padded(sizes, w)
    shards = 4 * sum(pads) // w
    top = shards + bound(sizes, w) + RSS_NOISE
    n = len(pads)
    return [top] * n + [top + 4 * sum(pads[u + 1:]) // w
                        for u in reversed(range(n))]


def gathers_before(n_units: int) -> list[int]:
    """All-gathers the window must hold before each point but the first:
    each unit's before its forward, and all forward's plus its second
    before its backward."""
    return [u + 1 for u in range(n_units)] + [
        2 * n_units - u for u in reversed(range(n_units))]


def peaks(cfg, w: int, window: int, calls: list, pts: list) -> list:
    """One rank's ``[where, growth, allowed]`` at each of the probe's
    points, from the hub's record: ``window`` the number of the probe's
    counting window (from 0), ``calls`` its calls, ``pts`` the points
    the rank marked after the checked steps. A ValueError when the points
    are not the probe's, in its order: the first before the constructor's
    window, the others in the probe's, each after the all-gathers it
    needs."""
    n = len(cfg["probe"]["sizes"]) - 1
    if [p[0] for p in pts] != names(n):
        raise ValueError("the memory probe's points are not the "
                         "harness's: " + ", ".join(p[0] for p in pts[:4]))
    if pts[0][1:3] != [window - 1, -1]:
        raise ValueError(f"the point '{BASE}' came after the model")
    if any(p[3] < 0 for p in pts):
        raise ValueError("a point with no memory count")
    out = []
    for p, most, need in zip(pts[1:], allowed(cfg, w), gathers_before(n)):
        got = sum(c[0] == "all_gather" for c in calls[:max(p[2], 0)])
        if p[1] != window + 1:
            raise ValueError(f"the point '{p[0]}' outside the probe's "
                             "window")
        if got < need:
            raise ValueError(
                f"the harness's layer computed {p[0]} (unit numbers from "
                f"0) after {got} all-gathers of the probe's step, not "
                f"{need}: FULL_SHARD gathers each unit before its forward "
                "and again before its backward")
        out.append([p[0], p[3] - pts[0][3], most])
    return out


def probe(mod, cfg, rank) -> None:
    """The student's FSDP over the probe's units, one forward and one
    backward in a counting window, points marked by the harness's layer;
    a point first, before the units exist (``labkit.buildit.held``).
    """
    import torch
    from torch import nn

    from labkit.buildit import held, points
    from labkit.buildit.fsdp_units import Probe, units
    from labkit.measure.collectives import CollectiveCounter
    held.release()    # the checked run, released by the caller
    sizes = cfg["probe"]["sizes"]
    g = torch.Generator().manual_seed(cfg["seed"] + 2 + rank)
    x = torch.randn(cfg["batch"], sizes[0], generator=g)
    y = torch.randn(cfg["batch"], sizes[-1], generator=g)
    points.mark(BASE)
    seen = Probe(mark=True)
    us = units({"sizes": sizes, "seed": cfg["seed"]}, seen)
    with CollectiveCounter():       # the constructor's window
        fsdp = mod.FSDP(us, cfg["lr"])
    with CollectiveCounter():       # forward and backward: the points
        h = x
        for u in us:
            h = u(h)
        nn.functional.mse_loss(h, y).backward()
    del fsdp


def staged(result) -> str | None:
    """The reason when a rank held memory it could free between the
    probe's points (``labkit.buildit.held``): beyond the probe's batch,
    nothing of its own at the first."""
    from labkit.buildit import held
    cfg = result["config"]
    s = cfg["probe"]["sizes"]
    return held.check(result, [r.get("probe_rss") for r in
                               result["ranks"]],
                      4 * cfg["batch"] * (s[0] + s[-1]))


def check_peak_rss(result):
    cfg, w = result["config"], len(result["ranks"])
    got = [r.get("peak_rss") for r in result["ranks"]]
    said = next((g for g in got if type(g) is str), None) or \
        staged(result)
    if said or not all(type(g) is list and g for g in got):
        return False, None, "grader-measured", said or (
            "the grader has no memory count of your FSDP's units")
    where, over, grew, most = max(
        ((p[0], p[1] - p[2], p[1], p[2]) for g in got for p in g),
        key=lambda t: t[1])
    from labkit.buildit.fsdp_units import numels
    unit = 4 * max(numels(cfg["probe"]["sizes"]))
    said = (f"growth <= shards + one unit and its prefetch (+ gradient "
            f"shards in backward) = {most} B at {where} (grader-measured)")
    if over <= 0:
        return True, f"{grew} B (at {where})", said, ""
    return False, f"{grew} B (at {where})", said, (
        f"at {where} (unit numbers from 0) a rank's memory had grown by "
        f"{grew} bytes since before the model existed (the grader "
        f"counted), {over} more than FULL_SHARD holds there: its shards, "
        f"one gathered unit and the one it prefetches and, in backward, "
        f"the averaged gradient shards (a unit is {unit} B here). Free a "
        "unit's full parameters after its forward and after its backward "
        "(swap `p.data` for an empty tensor, or resize its storage to 0), "
        "keep no cache of what the all-gathers return, and free the full "
        "gradient once it is reduce-scattered")
