"""Build it, lab 4: what the student's ZeRO optimizer keeps between steps.

    check_state(result)            # a check of labkit.buildit.zero
    check_freed_rss(result)        # the memory half of its "freed"
    probe(mod, cfg, rank)          # rank side, the hidden run's only

On ranks that count themselves (the notebook's run) the harness measures
it (``labkit.buildit.kept``, in the rank's process): between Adam's two
moments (8 Psi / N bytes) and those plus the fp32 master (12 Psi / N);
full Adam on every rank keeps 8 Psi and fails. That process imports the
student's code, which can rewrite the measure
(tests/buildit/hostile_zero_kept.py), so under grading the grader
measures from outside:

``probe`` (the hidden run's only, on ``HIDDEN_WORLD`` = 4 ranks): after
the checked steps each rank builds a bigger MLP (2.1 M parameters) and
runs the student's optimizer on it for two steps, between two empty
counting windows; the grader's hub reads the rank's memory from outside
as each window opens (scripts/grading/memory.py), and the growth from
the first to the last, the gradients freed, is what the optimizer keeps
(``state_rss``, set by ``from_hub``). It holds the kernel's count of
everything the rank keeps, the gradient shard too: ZeRO-2 at most 16 Psi
/ N (moments, master, gradient shard), full Adam 8 Psi. The two are the
same at N = 2, hence 4 ranks: 4 Psi against 8 Psi, 8.4 MB apart here,
decided at their middle. State parked outside the rank's process between
steps (tests/buildit/hostile_zero_parked.py: Adam's second moment in a
file of its own folder) is in the hub's readings all the same
(scripts/grading/memory.py, rank_cgroup.py). The same counts give the
memory half of ``freed`` (``grads_rss_per_step``): the growth over each
of the probe's backward passes, the gradients that outlive it, at most
Phi / 2 (ZeRO-2 keeps only its shard; a rank that never frees holds Phi,
8.4 MB here).

Both are differences a rank could stage with a block it frees between
two readings (tests/buildit/hostile_zero_ballast.py,
hostile_zero_hook_ballast.py): so at the probe's first reading a rank
holds nothing beyond the probe's model and data since before the
student's code was imported (``labkit.buildit.held``), and as each
backward begins no more than after its last step
(``freed_rss_per_step``: ZeRO's state only grows). A block kept as
state, freed in backward and allocated again in ``step()``
(hostile_zero_state_ballast.py) passes both, and at N = 4 it fits in
the state's bound (16 Psi / N = Phi there). So the hub also reads the
rank at every collective it performs (``call_rss``) and the checks hold
each reading of a backward, from the probe's first, to what that point
may hold (``backward_held``): ZeRO-2's whole state (16 Psi / N), and at a
reduce-scatter the gradients of one layer (one matmul's weight and bias)
and the call's buffers; a rank that keeps every gradient holds Phi and
Adam's moments (8 Psi / N) at the end of backward.
"""
from __future__ import annotations

# what a rank's memory count moves by itself between two windows
RSS_NOISE = 1 << 20
# what ``probe_counts`` gives; a rank's own values of these are dropped
MEASURED = ("state_rss", "grads_rss_per_step", "probe_rss",
            "freed_rss_per_step", "held_rss_per_step")


def probe_counts(rss, steps: int, probe_steps: int) -> dict:
    """From one rank's memory counts at its windows' openings (the hub's:
    the checked steps' ``2 steps + 1`` windows, then the probe's before,
    constructor, backward and ``step()`` per step, after): ``state_rss``,
    the growth from before to after; ``grads_rss_per_step``, the growth
    over each backward (the gradients still alive when it ends);
    ``probe_rss``, the count before (``labkit.buildit.held``);
    ``freed_rss_per_step``, how much more the rank held as each backward
    began than after the last step (what a backward could free that is
    not a gradient)."""
    n = 2 * steps + 1 + 2 * probe_steps + 3
    if type(rss) is not list or len(rss) != n or \
            any(type(v) is not int or v < 0 for v in rss):
        raise ValueError("no memory count for every window")
    base = 2 * steps + 1
    back = [base + 2 + 2 * k for k in range(probe_steps)]
    return {"state_rss": rss[-1] - rss[base],
            "grads_rss_per_step": [rss[b + 1] - rss[b] for b in back],
            "probe_rss": rss[base],
            "freed_rss_per_step": [rss[b] - rss[-1] for b in back]}


def backward_held(cfg, w: int, rss, calls, windows) -> list:
    """Per probe step, the most one rank held during backward beyond what
    that point may hold, from the probe's first reading (``rss``: the
    hub's at the windows' openings): at each call of the backward's
    window (``calls``: the hub's readings, ``windows``: its calls), the
    reading less the call's buffer, its shard and the gradients of the
    layer its tensor belongs to (a buffer of no tensor's size, a bucket:
    twice its bytes); at the end (the step's window opening), nothing."""
    from labkit.buildit.sharding import numels
    n = numels(cfg["probe"]["sizes"])
    layer = {}                 # a tensor's padded bytes -> its layer's
    for i, k in enumerate(n):
        key = 4 * w * -(-k // w)
        layer[key] = max(layer.get(key, 0), 4 * (n[i - i % 2] +
                                                 n[i - i % 2 + 1]))
    if type(calls) is not list or len(calls) != len(windows):
        raise ValueError("no memory count at every window's calls")
    base = 2 * cfg["steps"] + 1
    out = []
    for k in range(cfg["probe"]["steps"]):
        b = base + 2 + 2 * k
        got, seen = calls[b], windows[b]
        if type(got) is not list or len(got) != len(seen) or \
                any(type(v) is not int or v < 0 for v in got):
            raise ValueError("no memory count at every call")
        most = rss[b + 1] - rss[base]
        for v, c in zip(got, seen):
            size = c[1] if type(c[1]) is int else 0
            may = size + size // w + layer.get(size, size)
            most = max(most, v - rss[base] - may)
        out.append(most)
    return out


def course_bytes(cfg) -> int:
    """What the probe's own code holds at its first reading: the model's
    fp32 parameters and one batch of inputs and targets."""
    from labkit.buildit.sharding import numels
    s = cfg["probe"]["sizes"]
    return 4 * (sum(numels(s)) + cfg["batch"] * (s[0] + s[-1]))


def staged(result) -> str | None:
    """The reason when a rank held memory it could free between the
    probe's readings (``labkit.buildit.held``), else None."""
    from labkit.buildit import held
    return held.check(result, [r.get("probe_rss") for r in
                               result["ranks"]],
                      course_bytes(result["config"]))


def psi_sizes(cfg, w):
    from labkit.buildit.sharding import numels
    n = numels(cfg["sizes"])
    return sum(n), sum(-(-k // w) for k in n)   # Psi; shards padded per tensor


def state_bounds(cfg, w) -> tuple[int, int]:
    """Bytes a rank's ZeRO optimizer keeps between steps: Adam's two fp32
    moments for its shard (8 Psi / N) at least, those and an fp32 master
    shard (12 Psi / N, shards padded per tensor, a scalar step count per
    tensor) at most."""
    from labkit.buildit.sharding import numels
    psi, padded = psi_sizes(cfg, w)
    return 8 * psi // w, 12 * padded + 64 * len(numels(cfg["sizes"]))


def rss_bounds(cfg, w) -> tuple[int, int]:
    """What the grader's count of the probe's kept memory may be: Adam's
    moments for the shard (8 Psi / N) less the count's noise at least;
    at most the middle of ZeRO-2's most (16 Psi / N: moments, fp32 master
    and gradient shard, padded) and full Adam's 8 Psi."""
    from labkit.buildit.sharding import numels
    n = numels(cfg["probe"]["sizes"])
    psi, padded = sum(n), sum(-(-k // w) for k in n)
    return 8 * psi // w - RSS_NOISE, (16 * padded + 8 * psi) // 2


def check_state_rss(result):
    from labkit.buildit.sharding import numels
    cfg, w = result["config"], len(result["ranks"])
    low, high = rss_bounds(cfg, w)
    psi = sum(numels(cfg["probe"]["sizes"]))
    got = [r.get("state_rss") for r in result["ranks"]]
    why = staged(result)
    if why:
        return False, got, f"{low} .. {high} B per rank (grader-measured)", \
            why
    bad = [g for g in got if type(g) is not int or not low <= g <= high]
    if not bad:
        return True, got, f"{low} .. {high} B per rank (grader-measured)", ""
    big = type(bad[0]) is int and bad[0] > high
    return False, got, f"{low} .. {high} B per rank (grader-measured)", (
        f"on a model of {psi} parameters, a rank's memory grew by "
        f"{bad[0]} bytes from before your optimizer existed to after its "
        f"second step (the grader counted, gradients freed): ZeRO keeps "
        f"Adam's moments, an fp32 master and the gradient for 1/N of the "
        f"parameters ({16 * psi // w} B at N = {w}); full Adam on every "
        f"rank keeps {8 * psi} B: " + (
            "build Adam over this rank's shard only, and free what a step "
            "all-gathers" if big else
            "keep Adam's moments for the shard from step to step"))


def check_state(result):
    if result.get("hub") is not None and result["config"].get("probe"):
        return check_state_rss(result)     # the grader's count, not kept
    w = len(result["ranks"])
    low, high = state_bounds(result["config"], w)
    full = 8 * psi_sizes(result["config"], w)[0]
    got = [r["state_bytes"] for r in result["ranks"]]
    bad = [g for g in got if type(g) is not int or not low <= g <= high]
    if not bad:
        return True, got, f"{low} .. {high} B per rank", ""
    fix = ("build Adam over this rank's shard only, not over the model's "
           "parameters" if type(bad[0]) is int and bad[0] > high else
           "keep Adam's moments for the shard from step to step")
    return False, got, f"{low} .. {high} B per rank", (
        f"your optimizer keeps {bad[0]} bytes between steps on a rank: "
        f"ZeRO keeps Adam's two fp32 moments for 1/N of the parameters "
        f"({low} B; {high} B with an fp32 master shard: 12 Psi / N), "
        f"where full Adam on every rank keeps {full} B: {fix}")


def probe(mod, cfg, rank) -> None:
    """The student's optimizer on a bigger model for ``probe["steps"]``
    steps, between two empty windows (where the hub reads the rank's
    memory), the gradients freed before the last. The caller has
    released its checked run (``labkit.buildit.held``)."""
    import torch
    from torch import nn

    from labkit.buildit import held
    from labkit.buildit.sharding import mlp
    from labkit.measure.collectives import CollectiveCounter
    p = cfg["probe"]
    held.release()
    model = mlp({"sizes": p["sizes"], "seed": cfg["seed"]})
    params = list(model.parameters())
    g = torch.Generator().manual_seed(cfg["seed"] + 2 + rank)
    x = torch.randn(cfg["batch"], p["sizes"][0], generator=g)
    y = torch.randn(cfg["batch"], p["sizes"][-1], generator=g)
    with CollectiveCounter():       # before: the model and data only
        pass
    with CollectiveCounter():
        opt = mod.ShardedAdam(params, lr=cfg["lr"])
    for _ in range(p["steps"]):
        model.zero_grad(set_to_none=True)
        with CollectiveCounter():
            nn.functional.mse_loss(model(x), y).backward()
        with CollectiveCounter():
            opt.step()
    model.zero_grad(set_to_none=True)
    with CollectiveCounter():       # after: and what the optimizer keeps
        pass


def check_freed_rss(result):
    """The second half of ``freed`` under the hub: over each of the
    probe's backward passes a rank's memory grows by the gradients still
    alive at its end; ZeRO-2 frees each once reduced (its shard, at most
    Phi / N, stays), ZeRO-1 or a rank that never frees holds Phi."""
    from labkit.buildit.sharding import numels
    phi = 4 * sum(numels(result["config"]["probe"]["sizes"]))
    got = [r.get("grads_rss_per_step") for r in result["ranks"]]
    if not all(type(g) is list and g and all(type(v) is int for v in g)
               for g in got):
        return False, None, f"<= Phi / 2 = {phi // 2} B", (
            "the grader has no memory count of your backward passes")
    want = f"<= Phi / 2 = {phi // 2} B (grader-measured)"
    why = staged(result)
    if why:
        return False, None, want, why
    ahead = [r.get("freed_rss_per_step") for r in result["ranks"]]
    if not all(type(g) is list and g and all(type(v) is int for v in g)
               for g in ahead):
        return False, None, want, (
            "the grader has no memory count of your backward passes")
    most = max(max(g) for g in ahead)
    if most > RSS_NOISE:
        return False, None, want, (
            f"as a backward pass began a rank held {most} B more than "
            f"after your optimizer's last step (the grader counted): "
            f"memory freed during backward that the optimizer does not "
            f"keep, so that the gradients that outlive backward look "
            f"smaller. ZeRO-2 frees each gradient once its shard is "
            f"reduced; free nothing else there")
    worst = max(max(g) for g in got)
    why = _held_in_backward(result) if worst <= phi // 2 else None
    if why:                  # its growth passes: a block freed in it
        return False, worst, want, why
    return worst <= phi // 2, worst, want, (
            f"on a model of Phi = {phi} B of gradients a rank's memory grew "
            f"by {worst} B over backward (the grader counted): the "
            "gradients outlived it. ZeRO-2 reduce-scatters each gradient as "
            "backward produces it (p.register_post_accumulate_grad_hook), "
            "keeps its shard and frees it (p.grad = None), so that the "
            "whole gradient never lives on a rank; ZeRO-1 keeps it until "
            "step()")


def held_limit(cfg, w: int) -> int:
    """The most a rank may hold during the probe's backward beyond what
    that point holds (``backward_held``): the middle of ZeRO-2's whole
    state (16 Psi / N, padded) and what a rank that keeps every gradient
    holds at the end of backward (Adam's moments, 8 Psi / N, and Phi),
    both above their tensors by the count's noise (the answer key's
    state reads 1.1 MB above them)."""
    from labkit.buildit.sharding import numels
    n = numels(cfg["probe"]["sizes"])
    psi, padded = sum(n), sum(-(-k // w) for k in n)
    return (16 * padded + 8 * psi // w + 4 * psi) // 2 + RSS_NOISE


def _held_in_backward(result) -> str | None:
    cfg, w = result["config"], len(result["ranks"])
    got = [r.get("held_rss_per_step") for r in result["ranks"]]
    if all(g is None for g in got):
        return None           # a hub without readings at its calls
    if not all(type(g) is list and g and all(type(v) is int for v in g)
               for g in got):
        return "the grader has no memory count at your backward's calls"
    most, limit = max(max(g) for g in got), held_limit(cfg, w)
    if most <= limit:
        return None
    return (f"during a backward pass a rank held {most} B more than when "
            f"the grader's memory probe began, beyond the gradients of "
            f"the layer it was reducing (the grader counted, at every "
            f"collective and as backward ended): ZeRO-2 holds no more "
            f"than its state there (16 Psi / N; {limit} B allowed, half way "
            f"to what a rank that keeps every gradient holds). Free each "
            f"gradient once its shard is reduced (p.grad = None), and free "
            f"nothing in backward that the optimizer keeps")
