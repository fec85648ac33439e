"""A rank's share of a part's data, dealt by the grader under grading.

    xs, ys = dealt.mine(share(cfg, w, rank))  # in a harness's rank_run
    part(whole, rank, n, dim)                 # what a ``share`` cuts
    dealt.seed(cfg)                           # what the data is drawn from

In a notebook's run every rank draws the whole batch from the
configuration's seed and takes its share: the numbers the checker's
reference uses too. A rank so knows the other ranks' data as well, and
could compute the answer alone (the whole batch's gradient, the whole
sequence's attention) and send messages of the right sizes that carry
nothing. Under grading the rerun (scripts/grading/ranks.py) draws a
``data_seed`` once the ranks are forked, so that no rank ever holds it,
and sets ``DEAL`` before any student code is imported: the rank's share
then comes from the grader's hub, drawn from that seed by the harness's
own ``share`` in the hub's process. What else a rank needs must come
through the collectives the hub counts; the checker's reference reads the
same seed (``labkit.buildit.verified``).
"""
from __future__ import annotations

# ``fn(out)``: fills ``out`` (float32, flat) with this rank's share, from
# the grader's hub (grading sets it); None: the rank's own draw stands
DEAL = None


def seed(cfg) -> int:
    """The seed a part's data is drawn from: the grader's ``data_seed``
    when it dealt the data, else the configuration's ``seed + 1``."""
    return int(cfg.get("data_seed", cfg["seed"] + 1))


def part(ts: list, r: int, n: int, dim: int) -> list:
    """Rank ``r``'s ``n`` entries of each tensor along ``dim``: what a
    harness's ``share`` gives it."""
    return [t.narrow(dim, r * n, n).contiguous() for t in ts]


def mine(local: list) -> list:
    """This rank's share: ``local`` (its own draw) on a rank that draws
    for itself; under grading the same shapes, filled by the hub."""
    if DEAL is None:
        return local
    import torch
    if any(t.dtype != torch.float32 for t in local):
        raise ValueError("a dealt share is float32")
    flat = torch.empty(sum(t.numel() for t in local))
    DEAL(flat)
    out, at = [], 0
    for t in local:
        out.append(flat[at:at + t.numel()].view(t.shape))
        at += t.numel()
    return out


def flat_share(share, cfg, w: int, r: int):
    """The hub's side: rank ``r``'s share as one flat float32 tensor."""
    import torch
    return torch.cat([t.reshape(-1).float() for t in share(cfg, w, r)])
