"""The exact collective calls of one step of a real model (pure Python).

    from labkit.predict import sharding as S
    calls = S.predict_calls(unit_shapes, 4, "fsdp2_full")   # one rank's
    S.summarize(calls)            # {op: {"calls", "bytes"}}, a counter's shape
    S.node_split(calls, S.node_of_rank(4, 2))   # inside vs across nodes

:mod:`labkit.predict.sharding` gives the volume of a strategy in units of
Phi; this module gives each call a counter
(:mod:`labkit.measure.collectives`) records for a given model: FSDP's
padding (:func:`fsdp_unit_numel`), DDP's rebuilt buckets
(:func:`ddp_buckets`), the groups each call runs in, and how many bytes
stay inside a node (:func:`node_split`). Lab 3 compares them byte for byte.
"""
from __future__ import annotations

import math

from labkit.predict.sharding.names import _positive, canonical


def fsdp_unit_numel(shapes, world_size: int, version: int = 2,
                    align_numel: int = 0) -> int:
    """Elements one FSDP unit all-gathers (output) / reduce-scatters (input).

    FSDP2 shards every parameter on dim 0 with ``torch.chunk`` and pads each
    to ceil(d0/N) rows (``_get_dim0_padded_size``), so the unit's buffer is
    sum(ceil(d0/N) * N * rest). FSDP1 flattens the unit's parameters into
    one FlatParameter -- with ``use_orig_params=True`` each parameter starts
    at a multiple of ``align_numel`` elements (16 bytes) -- and pads the
    total to a multiple of N (``FlatParamHandle.shard``).
    """
    if version not in (1, 2):
        raise ValueError(f"FSDP version must be 1 or 2, got {version!r}")
    n = world_size
    if version == 2:
        total = 0
        for shape in shapes:
            d0 = shape[0] if shape else 1
            rest = math.prod(shape[1:]) if len(shape) > 1 else 1
            total += math.ceil(d0 / n) * n * rest
        return total
    total = 0
    for i, shape in enumerate(shapes):
        if align_numel and i and total % align_numel:
            total += align_numel - total % align_numel
        total += math.prod(shape) if shape else 1
    return math.ceil(total / n) * n


def ddp_buckets(sizes_bytes, bucket_cap_mb: float | None = None) -> list:
    """Bucket sizes (bytes) DDP all-reduces in steady state, in order.

    ``sizes_bytes``: gradient bytes of each parameter in the order the
    gradients become ready (about the reverse of ``model.parameters()``).
    After its first iteration DDP rebuilds its buckets in that order with
    the greedy rule of ``compute_bucket_assignment_by_size``
    (torch/csrc/distributed/c10d/reducer.cpp): add tensors until a bucket
    holds >= its limit; the first bucket's limit is 1 MiB when
    ``bucket_cap_mb`` is left at its default (25 MiB), else the cap itself.
    """
    mib = 1024 * 1024
    if bucket_cap_mb is None:
        limits = [1 * mib, 25 * mib]
    else:
        _positive(bucket_cap_mb=bucket_cap_mb)
        limits = [int(bucket_cap_mb * mib)]
    out, cur, li = [], 0, 0
    for b in sizes_bytes:
        cur += b
        if cur >= limits[li]:
            out.append(cur)
            cur, li = 0, min(li + 1, len(limits) - 1)
    if cur:
        out.append(cur)
    return out


def predict_calls(unit_shapes, world_size: int, strategy: str,
                  param_bytes: int = 4, grad_bytes: int | None = None,
                  shard_group: int | None = None, version: int = 2,
                  bucket_cap_mb: float | None = None,
                  align_numel: int = 0, rank: int = 0) -> list[dict]:
    """The collective calls of one steady-state step on rank ``rank``.

    ``unit_shapes``: for each FSDP unit (``labkit.nn.model.sharding_units``),
    the shapes of its parameters in registration order. Returns dicts with
    the keys a counter record has: ``op``, ``numel``, ``bytes``,
    ``group_size``, ``ranks`` -- forward calls first, then backward's (the
    exact interleaving depends on prefetching). DDP's buckets come from
    :func:`ddp_buckets` on the reversed parameter order. A hybrid shard
    group is F consecutive ranks, a replica group every F-th rank
    (``torch.distributed.device_mesh`` with mesh ``(N/F, F)``).
    """
    s = canonical(strategy)
    grad_bytes = param_bytes if grad_bytes is None else grad_bytes
    n = world_size
    calls: list[dict] = []

    def call(op, numel, elem, group):
        if group == n:
            ranks = list(range(n))
        elif op == "all_reduce":            # replicas: every (n/group)-th
            ranks = list(range(rank % (n // group), n, n // group))
        else:                               # shard group: consecutive
            first = rank - rank % group
            ranks = list(range(first, first + group))
        calls.append({"op": op, "numel": int(numel),
                      "bytes": int(numel * elem), "group_size": group,
                      "ranks": ranks})

    if s == "ddp":
        sizes = [math.prod(sh) * grad_bytes
                 for unit in reversed(unit_shapes) for sh in reversed(unit)]
        for b in ddp_buckets(sizes, bucket_cap_mb):
            call("all_reduce", b // grad_bytes, grad_bytes, n)
        return calls
    if s == "no_shard":  # FSDP1 NO_SHARD: one all-reduce per unit, backward
        for unit in reversed(unit_shapes):
            call("all_reduce", fsdp_unit_numel(unit, 1, 1, align_numel),
                 grad_bytes, n)
        return calls
    if s not in ("full_shard", "zero3", "shard_grad_op", "hybrid_shard",
                 "hybrid_shard_zero2"):
        raise ValueError(f"predict_calls does not model {strategy!r} "
                         "(DeepSpeed ZeRO-1/2 is chapter 4's)")
    f = n
    if s.startswith("hybrid"):
        f = shard_group or 2
        if n % f:
            raise ValueError(f"{n} ranks are not groups of {f}")
    numels = [fsdp_unit_numel(u, f, version, align_numel)
              for u in unit_shapes]
    for m in numels:                                   # forward
        call("all_gather", m, param_bytes, f)
    for m in reversed(numels):                         # backward
        if s in ("full_shard", "zero3", "hybrid_shard"):
            call("all_gather", m, param_bytes, f)
        call("reduce_scatter", m, grad_bytes, f)
        if s.startswith("hybrid") and n // f > 1:
            call("all_reduce", m // f, grad_bytes, n // f)
    return calls


def node_of_rank(world_size: int, ranks_per_node: int) -> list[int]:
    """torchrun numbers ranks node by node: rank r runs on node r // G."""
    _positive(world_size=world_size, ranks_per_node=ranks_per_node)
    if world_size % ranks_per_node:
        raise ValueError(f"{world_size} ranks do not fill nodes of "
                         f"{ranks_per_node}")
    return [r // ranks_per_node for r in range(world_size)]


def node_split(calls, node_of: list[int]) -> dict:
    """Bytes of calls whose group stays inside one node vs spans nodes.

    HYBRID_SHARD with the shard group = one node (FSDP paper, Sec. 3.2.2)
    keeps the all-gathers and reduce-scatters inside and sends only the
    gradient shards' all-reduce across nodes.
    """
    out = {"inside": 0, "across": 0}
    for c in calls:
        inside = len({node_of[r] for r in c["ranks"]}) == 1
        out["inside" if inside else "across"] += c["bytes"]
    return out


def summarize(calls) -> dict:
    """``{op: {"calls", "bytes"}}``, the shape of CollectiveCounter.summary."""
    out: dict = {}
    for c in calls:
        d = out.setdefault(c["op"], {"calls": 0, "bytes": 0})
        d["calls"] += 1
        d["bytes"] += c["bytes"]
    return out
