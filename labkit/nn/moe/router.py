"""The router: which ``k`` experts each token visits, with what weight,
and which assignments a capacity drops.

    from labkit.nn.moe.router import route, keep_within_capacity, aux_loss
    w, idx, probs = route(logits, top_k=2)            # Mixtral
    w, idx, probs = route(logits, 8, "sigmoid", scaling=2.5,
                          groups=8, group_top_k=4)    # DeepSeek-V3

- ``softmax`` scores (Shazeer et al. 2017, Eq. 3-5; Mixtral, Qwen) or
  ``sigmoid`` scores (DeepSeek-V3, Liu et al. 2024, Eq. 15);
- the top ``k`` scores are the gate weights, renormalised to sum 1 when
  ``norm_topk`` (Eq. 13 of the V3 report), then scaled;
- node-limited routing (V3 Sec. 2.1.2): experts fall into ``groups``; a
  group's score is the sum of its two best scores and a token picks its
  experts among the best ``group_top_k`` groups only;
- ``bias`` (V3's auxiliary-loss-free balancing, Sec. 2.1.2, Eq. 16): a
  per-expert bias added for the choice only, never to the weights.

Capacity (Lepikhin et al. 2020, GShard Sec. 2.2; Fedus et al. 2022,
Switch Eq. 3): each expert takes at most ``C = ceil(c k T / E)`` of the
``k T`` assignments; the rest are dropped (their token still passes
through the residual). Priority is GShard's: every token's first choice
before any second choice, then by token order. How many are dropped does
not depend on the priority: ``sum_e max(0, n_e - C)``
(:func:`labkit.predict.experts.dropped`).
"""
from __future__ import annotations

import math

import torch


def route(logits, top_k: int, router: str = "softmax",
          norm_topk: bool = True, scaling: float = 1.0, groups: int = 0,
          group_top_k: int = 0, bias=None):
    """``(weights [T, k], experts [T, k], probs [T, E])`` for ``[T, E]``
    router logits; ``probs`` are the scores the aux loss reads."""
    probs = (logits.float().softmax(-1) if router == "softmax"
             else logits.float().sigmoid())
    choice = probs if bias is None else probs + bias
    if groups:
        t, e = choice.shape
        g = choice.view(t, groups, e // groups)
        best = g.topk(min(2, e // groups), dim=-1).values.sum(-1)
        keep = torch.zeros_like(best).scatter_(
            1, best.topk(group_top_k, dim=-1).indices, 1.0)
        mask = keep.repeat_interleave(e // groups, dim=1).bool()
        choice = choice.masked_fill(~mask, float("-inf"))
    idx = choice.topk(top_k, dim=-1).indices
    w = probs.gather(-1, idx)
    if norm_topk:
        w = w / w.sum(-1, keepdim=True)
    return (w * scaling).to(logits.dtype), idx, probs


def capacity(factor: float, top_k: int, tokens: int, experts: int) -> int:
    """``ceil(c k T / E)`` assignments per expert (GShard Sec. 2.2)."""
    return math.ceil(factor * top_k * tokens / experts)


def keep_within_capacity(idx, experts: int, cap: int | None):
    """A ``[T, k]`` bool mask: True where the assignment is kept."""
    if cap is None:                       # dropless
        return torch.ones_like(idx, dtype=torch.bool)
    order = idx.t().reshape(-1)           # first choices first (GShard)
    onehot = torch.nn.functional.one_hot(order, experts)
    position = (onehot.cumsum(0) * onehot).sum(-1) - 1   # place in queue
    return (position < cap).view(idx.shape[1], idx.shape[0]).t()


def counts(idx, experts: int, keep=None):
    """Assignments per expert (kept ones only when ``keep`` is given)."""
    flat = idx if keep is None else idx[keep]
    return torch.bincount(flat.reshape(-1), minlength=experts)


def aux_loss(probs, idx, experts: int):
    """Switch Transformer's load-balancing loss (Fedus et al. 2022,
    Eq. 4-6) without its alpha: ``E sum_i f_i P_i``, ``f_i`` the fraction
    of the ``k T`` assignments routed to expert ``i`` (before drops),
    ``P_i`` the mean router probability of expert ``i``. 1.0 when
    perfectly balanced; E when every token picks one expert."""
    f = counts(idx, experts).float() / idx.numel()
    return experts * (f * probs.float().mean(0)).sum()


def imbalance(load) -> float:
    """Max over mean of a per-expert load (1.0 = perfectly even)."""
    load = torch.as_tensor(load, dtype=torch.float64)
    return (load.max() / load.mean()).item() if load.sum() else 1.0
