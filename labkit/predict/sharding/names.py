"""Names of the data-parallel strategies, and the check of a positive
size, shared by :mod:`labkit.predict.sharding` (volumes in units of Phi)
and :mod:`labkit.predict.sharding.calls` (the exact calls of a model).

    from labkit.predict.sharding.names import canonical
    canonical("fsdp2_full")   # -> "full_shard"
"""
from __future__ import annotations

import math

STRATEGIES = ("ddp", "no_shard", "zero1", "zero2", "shard_grad_op", "zero3",
              "full_shard", "hybrid_shard", "hybrid_shard_zero2")
# The ZeRO volume of each logical byte: an all-reduce is a reduce-scatter
# plus an all-gather (ZeRO Sec. 7.1).
PHI_UNITS = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1,
             "broadcast": 1,
             # DeepSpeed ZeRO-1/2 without multi-rank bucket all-reduce send
             # each gradient slice to its owner: N reduces of Phi/N elements,
             # a reduce-scatter done piecewise (lab 4).
             "reduce": 1}
# FSDP2 / FSDP1 / DeepSpeed names -> the names of this module.
ALIASES = {"fsdp2_full": "full_shard", "fsdp2_grad_op": "shard_grad_op",
           "fsdp2_hybrid": "hybrid_shard", "fsdp1_full_shard": "full_shard",
           "fsdp1_shard_grad_op": "shard_grad_op",
           "fsdp1_no_shard": "no_shard", "fsdp1_hybrid_shard": "hybrid_shard",
           "zero0": "ddp"}


def canonical(strategy: str) -> str:
    s = ALIASES.get(strategy, strategy)
    if s not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}: choose from "
                         f"{', '.join(STRATEGIES)}")
    return s


def _positive(**kw) -> None:
    for name, v in kw.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
                v > 0 and math.isfinite(v)):
            raise ValueError(f"{name} must be a positive number, got {v!r}")
