"""Build it, lab 4: what the student's ZeRO optimizer keeps between steps.

    check_state(result)            # a check of labkit.buildit.zero
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
decided at their middle.
"""
from __future__ import annotations

# what a rank's memory count moves by itself between two windows
RSS_NOISE = 1 << 20


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
    memory), the gradients freed before the last."""
    import torch
    from torch import nn

    from labkit.buildit.sharding import mlp
    from labkit.measure.collectives import CollectiveCounter
    p = cfg["probe"]
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
