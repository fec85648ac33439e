"""The mixture-of-experts layer in one process: the reference that the
expert-parallel layer (:mod:`labkit.nn.moe.expert_parallel`) is held to.

    from labkit import arch
    from labkit.nn.model import build_arch
    a = arch.preset("llama-tiny").with_(experts=4, top_k=2, expert_ffn=32)
    m = build_arch(a)              # each block's mlp is a MoE
    m.blocks[0].mlp.capacity_factor = 1.25     # None: dropless
    python -m labkit.nn.moe.layer     # one layer: counts, drops, aux loss

A token's output is ``sum_j w_j E_j(x)`` over its ``k`` kept experts
(Shazeer et al. 2017, Eq. 1), plus the shared experts (DeepSeekMoE, Dai
et al. 2024, Eq. 3-5; Qwen2-MoE scales them by a sigmoid gate). The
computation is the one expert parallelism distributes, step by step:

1. route: ``w, idx`` for every token (:func:`labkit.nn.moe.router.route`);
2. drop what exceeds each expert's capacity (or nothing: dropless);
3. permute: the kept ``(token, expert)`` assignments sorted by expert,
   so each expert reads one contiguous block of rows (:func:`plan`);
4. each expert runs on its block;
5. un-permute and combine: row ``j`` goes back to its token, times its
   weight, added (``index_add_``).

Under expert parallelism step 3 is followed by an all-to-all (the rows
travel to the ranks that hold their experts) and step 5 is preceded by
another one (they come back): twice per layer forward, twice backward.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from labkit.nn.mlp import MLP
from labkit.nn.moe import router as R


Expert = MLP   # an expert is the decoder's MLP at expert_ffn wide


def plan(idx, keep, weights):
    """The permutation of step 3: ``(tokens, weights, per_expert)``, the
    token of each kept assignment sorted by expert (stable: token order
    within an expert), its gate weight, and how many each expert got."""
    t = torch.arange(idx.shape[0], device=idx.device)
    t = t.unsqueeze(1).expand_as(idx)
    e, tok, w = idx[keep], t[keep], weights[keep]
    order = torch.argsort(e, stable=True)
    return tok[order], w[order], e[order]


def run_experts(experts, rows, per_expert: list):
    """Step 4: expert ``j`` on its ``per_expert[j]`` contiguous rows."""
    outs, start = [], 0
    for m, n in zip(experts, per_expert):
        outs.append(m(rows[start:start + n]))
        start += n
    return torch.cat(outs) if outs else rows[:0]


class MoE(nn.Module):
    """Router, ``experts`` routed experts, the shared MLP (and its gate)."""

    capacity_factor = None      # None: dropless; else c of ceil(c k T / E)

    def __init__(self, a):
        super().__init__()
        self.a = a
        # gpt-oss's router and experts have biases (``expert_bias``,
        # modeling_gpt_oss.py: GptOssTopKRouter, GptOssExperts)
        bias = a.mlp_bias or a.expert_bias
        self.gate = nn.Linear(a.hidden, a.experts, bias=a.expert_bias)
        self.experts = nn.ModuleList(Expert(a, a.expert_ffn, bias)
                                     for _ in range(a.experts))
        self.shared = Expert(a, a.shared_ffn) if a.shared_experts else None
        self.shared_gate = (nn.Linear(a.hidden, 1, bias=False)
                            if a.shared_gate else None)
        self.aux_loss = None
        self.stats = {}

    def route(self, x):
        """Steps 1 and 2 for ``[T, h]`` tokens: weights, experts, kept."""
        a = self.a
        w, idx, probs = R.route(self.gate(x), a.top_k, a.router,
                                a.norm_topk, a.routed_scaling,
                                a.expert_groups, a.group_top_k)
        cap = (None if self.capacity_factor is None else
               R.capacity(self.capacity_factor, a.top_k, x.shape[0],
                          a.experts))
        keep = R.keep_within_capacity(idx, a.experts, cap)
        self.aux_loss = R.aux_loss(probs, idx, a.experts)
        self.stats = {"tokens": x.shape[0], "capacity": cap,
                      "routed": R.counts(idx, a.experts).tolist(),
                      "kept": R.counts(idx, a.experts, keep).tolist()}
        return w, idx, keep

    def shared_out(self, x):
        if self.shared is None:
            return 0
        y = self.shared(x)
        if self.shared_gate is not None:
            y = torch.sigmoid(self.shared_gate(x)) * y
        return y

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        w, idx, keep = self.route(x)
        tok, wt, _ = plan(idx, keep, w)
        out = run_experts(self.experts, x[tok], self.stats["kept"])
        y = torch.zeros_like(x).index_add_(
            0, tok, (out * wt.unsqueeze(1)).to(x.dtype))  # autocast: bf16 rows
        return (y + self.shared_out(x)).view(shape)


def moe_blocks(model) -> list:
    """The MoE layers of a decoder, in order."""
    return [m for m in model.modules() if isinstance(m, MoE)]


def total_aux_loss(model):
    """The sum of the layers' aux losses of the last forward."""
    return sum(m.aux_loss for m in moe_blocks(model))


if __name__ == "__main__":
    from labkit import arch
    a = arch.preset("llama-tiny").with_(experts=4, top_k=2, expert_ffn=32)
    torch.manual_seed(0)
    m = MoE(a)
    for c in (None, 1.0, 1.25, 2.0):
        m.capacity_factor = c
        m(torch.randn(64, a.hidden))
        s = m.stats
        print(f"capacity factor {c}: capacity {s['capacity']}, routed "
              f"{s['routed']}, kept {s['kept']}, aux "
              f"{m.aux_loss.item():.3f}")
