"""The MoE layer with its experts spread over an ``ep`` process group:
dispatch and combine with ``all_to_all_single`` and uneven splits.

    from labkit.nn.moe.expert_parallel import ExpertParallelMoE
    block.mlp = ExpertParallelMoE(block.mlp, ep_group)   # same weights

Rank ``r`` of the EP group keeps experts ``r E/ep .. (r+1) E/ep - 1`` of
the one-process layer (:class:`labkit.nn.moe.layer.MoE`) and drops the rest;
the router, the shared MLP and everything outside the layer stay
replicated. One forward, after the router (steps 1-2 of the layer):

1. **counts first**: every rank sends each peer how many rows it has for
   each of the peer's experts (``E`` int64, an even all-to-all), so that
   each side knows the uneven split sizes before any row moves;
2. **dispatch**: the kept assignments, sorted by expert (hence by owner),
   go to their owners (``all_to_all_single`` with ``input_split_sizes``
   = what I send each peer, ``output_split_sizes`` = what each sends me);
3. the received rows, ordered by source, are regrouped by local expert,
   the experts run, and the rows go back to source order;
4. **combine**: the reverse all-to-all (the splits swapped) returns each
   row to the rank of its token, which weights and adds it.

Autograd runs the two all-to-alls again in backward, in reverse
(``all_to_all_single_autograd``): four
all-to-alls of rows per layer per step, plus the counts.
"""
from __future__ import annotations

import torch
import torch.distributed as tdist
import torch.nn as nn
from torch.distributed._functional_collectives import \
    all_to_all_single_autograd

from labkit.nn.moe.layer import MoE, plan, run_experts


class ExpertParallelMoE(MoE):
    def __init__(self, moe: MoE, group):
        nn.Module.__init__(self)
        self.a, self.group = moe.a, group
        self.ep = tdist.get_world_size(group)
        self.ep_rank = tdist.get_rank(group)
        self.per = moe.a.experts // self.ep
        self.first = self.ep_rank * self.per
        self.gate, self.shared = moe.gate, moe.shared
        self.shared_gate = moe.shared_gate
        self.experts = nn.ModuleList(
            moe.experts[self.first:self.first + self.per])
        self.capacity_factor = moe.capacity_factor
        self.aux_loss, self.stats = None, {}

    def forward(self, x):
        shape, (ep, per) = x.shape, (self.ep, self.per)
        x = x.reshape(-1, shape[-1])
        w, idx, keep = self.route(x)
        tok, wt, _ = self.plan(idx, keep, w)
        got_counts = self.exchange_counts(x)         # 1. counts first
        send = [sum(self.stats["kept"][d * per:(d + 1) * per])
                for d in range(ep)]
        recv = [sum(row) for row in got_counts]      # [source][my expert]
        self.stats["received"] = [sum(c) for c in zip(*got_counts)]
        rows = x[tok]                                # 2. dispatch
        got = all_to_all(rows, recv, send, self.group)
        perm = regroup(got_counts, x.device)         # 3. by local expert
        out = run_experts(self.experts, got[perm], self.stats["received"])
        back = out[torch.argsort(perm)]              # source order again
        ret = all_to_all(back, send, recv, self.group)
        y = torch.zeros_like(x).index_add_(
            0, tok, (ret * wt.unsqueeze(1)).to(x.dtype))  # autocast: bf16 rows
        return (y + self.shared_out(x)).view(shape)  # 4. combined

    plan = staticmethod(plan)     # step 3 of the one-process layer

    def exchange_counts(self, x) -> list:
        """Every peer's kept rows for each of my experts, ``[source][j]``
        (an even all-to-all of ``E`` int64: the split sizes)."""
        kept = torch.tensor(self.stats["kept"], dtype=torch.int64,
                            device=x.device)
        got = torch.empty_like(kept)
        tdist.all_to_all_single(got, kept, group=self.group)
        return got.view(self.ep, self.per).tolist()


def all_to_all(x, out_splits: list, in_splits: list, group):
    """``all_to_all_single`` that autograd runs backward (the splits
    swapped); the functional form, waited on at once."""
    y = all_to_all_single_autograd(x, out_splits, in_splits, group)
    return y.wait() if hasattr(y, "wait") else y


def regroup(counts: list, device=None) -> torch.Tensor:
    """Row order that turns ``[source][expert]`` blocks into
    ``[expert][source]`` blocks (``counts[s][j]`` rows each)."""
    flat = [n for row in counts for n in row]
    start = [sum(flat[:i]) for i in range(len(flat))]
    per = len(counts[0]) if counts else 0
    parts = [torch.arange(start[s * per + j], start[s * per + j]
                          + counts[s][j], device=device)
             for j in range(per) for s in range(len(counts))]
    return (torch.cat(parts) if parts else
            torch.zeros(0, dtype=torch.long, device=device))


def expert_parameters(model) -> list:
    """``(name, parameter)`` of the routed experts of an EP model."""
    return [(n, p) for n, p in model.named_parameters()
            if ".mlp.experts." in n]
