"""K/V heads copied over tensor-parallel ranks, and the sum of the copies'
gradients (used by :mod:`labkit.runs.tp.gqa` and :mod:`labkit.runs.tp.llama`).

    torchrun --nproc-per-node 4 -m labkit.runs.tensor_parallel \
        --variants scratch --heads 8 --kv-heads 2 \
        --llama-variants scratch,no_kv_sum,wrong_kv_group

Under grouped-query attention (Ainslie et al. 2023) query head ``i`` reads
K/V head ``i // (a / kv)``. With ``t`` tensor-parallel ranks and
``t > kv`` there are not enough K/V heads to go round, so rank ``r`` of a
TP group keeps K/V head ``r // (t / kv)``: each head is held by
``t / kv`` *neighbouring* ranks
(:func:`labkit.predict.tensor_parallel.gqa.kv_split`'s ``replicas``). Each
copy's gradient holds only its own queries' share of the head's gradient;
the copies' gradients are summed among the ranks holding the same head
before the optimizer step (neuronx-distributed's ``kv_size_multiplier``
does the same), and the copies stay equal.

:func:`strided_ranks` is the mistake this sum can hide: groups of the
right size whose ranks hold *different* heads. The ``wrong_kv_group``
variant of :mod:`labkit.runs.tensor_parallel` sums over them, and its
gradients differ from one process's (``tests/test_runs_tp_gqa.py``).
"""
from __future__ import annotations

import torch.distributed as tdist

from labkit.predict.tensor_parallel.gqa import kv_split


def copy_ranks(tp_ranks: list, replicas: int) -> list:
    """The ranks of one TP group (in its local order) that hold the same
    K/V head: runs of ``replicas`` neighbours."""
    return [list(tp_ranks[j:j + replicas])
            for j in range(0, len(tp_ranks), replicas)]


def strided_ranks(tp_ranks: list, replicas: int) -> list:
    """The wrong groups (a negative control): ``replicas`` ranks each, every
    ``len/replicas``-th rank, so that a group's ranks hold different K/V
    heads (the same as :func:`copy_ranks` only when ``replicas`` is 1 or
    the whole group)."""
    n = len(tp_ranks) // replicas
    return [list(tp_ranks[j::n]) for j in range(n)]


def kv_copy_groups(tp_groups: list, a, ranks_of=copy_ranks) -> list:
    """``(ranks, process group)`` for each K/V head of each TP group in
    ``tp_groups`` (lists of global ranks, each in its local order); empty
    when the K/V heads go round (``replicas == 1``). Every rank makes every
    group, in the same order, as ``new_group`` asks."""
    reps = kv_split(a, len(tp_groups[0]))["replicas"]
    if reps == 1:
        return []
    return [(ranks, tdist.new_group(ranks)) for row in tp_groups
            for ranks in ranks_of(row, reps)]


def group_of(groups: list, rank: int):
    """This rank's group among :func:`kv_copy_groups`' (None if none)."""
    return next((g for ranks, g in groups if rank in ranks), None)


def sum_kv_grads(layers, group) -> None:
    """Sum the gradients of this rank's K/V copies (``layers``: its K and
    V modules) over ``group``, in place; under FSDP each rank's "dp"
    shard. Nothing to do without a group (the heads went round)."""
    if group is None:
        return
    for layer in layers:
        for p in layer.parameters():
            if p.grad is not None:
                g = p.grad
                tdist.all_reduce(g.to_local() if hasattr(g, "to_local")
                                 else g, group=group)
