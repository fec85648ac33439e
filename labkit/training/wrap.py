"""Wrap the tiny GPT for data parallelism: DDP, FSDP2 or FSDP1, by name.

    model = wrap(build(config), "fsdp2_full", ctx)

| name                 | API   | what it is                        | ZeRO  |
|----------------------|-------|-----------------------------------|-------|
| ddp                  | DDP   | replicas, all-reduce of buckets   | 0     |
| fsdp2_full           | FSDP2 | fully_shard(reshard_after_forward=True)  | 3 |
| fsdp2_grad_op        | FSDP2 | fully_shard(reshard_after_forward=False) | "2" |
| fsdp2_hybrid         | FSDP2 | 2-D mesh (replicate, shard)       | 3 in a group |
| fsdp1_full_shard     | FSDP1 | ShardingStrategy.FULL_SHARD       | 3     |
| fsdp1_shard_grad_op  | FSDP1 | ShardingStrategy.SHARD_GRAD_OP    | "2"   |
| fsdp1_no_shard       | FSDP1 | ShardingStrategy.NO_SHARD         | 0     |
| fsdp1_hybrid_shard   | FSDP1 | ShardingStrategy.HYBRID_SHARD     | 3 in a group |

The units FSDP shards one by one are :func:`labkit.nn.model.sharding_units`
(embeddings, each block, head); the root holds no parameter of its own.
"ZeRO-2" is in quotes: FSDP's SHARD_GRAD_OP keeps the unsharded weights from
forward to the end of backward only, not between steps (chapter 3).
Mixed precision (``bf16=True``) is bf16 compute with fp32 sharded weights
for FSDP (MixedPrecisionPolicy / MixedPrecision) and autocast for DDP.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn as nn

from labkit.nn.model import Block, Embeddings, Head, sharding_units

STRATEGIES = ("ddp", "fsdp2_full", "fsdp2_grad_op", "fsdp2_hybrid",
              "fsdp1_full_shard", "fsdp1_shard_grad_op", "fsdp1_no_shard",
              "fsdp1_hybrid_shard")
ZERO_EQUIVALENT = {"ddp": "ddp", "fsdp2_full": "full_shard",
                   "fsdp2_grad_op": "shard_grad_op",
                   "fsdp2_hybrid": "hybrid_shard",
                   "fsdp1_full_shard": "full_shard",
                   "fsdp1_shard_grad_op": "shard_grad_op",
                   "fsdp1_no_shard": "no_shard",
                   "fsdp1_hybrid_shard": "hybrid_shard"}


def shard_group_of(strategy: str, shard_group: int | None = None):
    """The ranks one copy of the states is sharded over inside a hybrid
    group (the wrap's default is 2); None for every other strategy."""
    if strategy.endswith(("hybrid", "hybrid_shard")):
        return shard_group or 2
    return None


def check_strategy(strategy: str, world_size: int,
                   shard_group: int | None = None) -> None:
    """Raise ValueError for a strategy that cannot run at this world size."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose from "
                         f"{', '.join(STRATEGIES)}")
    g = shard_group_of(strategy, shard_group)
    if g is not None:
        if world_size % g or world_size == g:
            raise ValueError(f"{strategy} needs a world size that is a "
                             f"multiple (> 1x) of the shard group {g}, "
                             f"got {world_size}")


def _mesh(ctx, shard_group: int | None):
    from torch.distributed.device_mesh import init_device_mesh
    g = shard_group_of("fsdp2_hybrid", shard_group)
    return init_device_mesh(ctx.device.type, (ctx.world_size // g, g),
                            mesh_dim_names=("replicate", "shard"))


def wrap(model: nn.Module, strategy: str, ctx, *, bf16: bool = False,
         bucket_cap_mb: float = 25.0, shard_group: int | None = None,
         gradient_as_bucket_view: bool = False) -> nn.Module:
    """Return ``model`` wrapped (in place for FSDP2) for ``strategy``.

    Only DDP (a full replica) moves the whole model to the rank's device;
    FSDP moves one unit at a time as it shards it (FSDP2's
    ``fully_shard`` moves its unit's states to the mesh's device, FSDP1
    with ``device_id`` its unit's module), so the GPU never holds the
    whole unsharded fp32 model (27 GB for lab 12's 6.7B; issue 28).
    """
    check_strategy(strategy, ctx.world_size, shard_group)
    if strategy == "ddp":
        model.to(ctx.device)
        from torch.nn.parallel import DistributedDataParallel as DDP
        return DDP(model, device_ids=[ctx.local_rank] if ctx.is_cuda else None,
                   bucket_cap_mb=bucket_cap_mb,
                   gradient_as_bucket_view=gradient_as_bucket_view)
    if strategy.startswith("fsdp2"):
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        kw = {"reshard_after_forward": strategy != "fsdp2_grad_op"}
        if bf16:
            kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                   reduce_dtype=torch.float32)
        if strategy == "fsdp2_hybrid":
            kw["mesh"] = _mesh(ctx, shard_group)
        for unit in sharding_units(model):
            fully_shard(unit, **kw)
        fully_shard(model, **kw)
        return model
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    kind = strategy.removeprefix("fsdp1_").upper()
    kw = dict(auto_wrap_policy=ModuleWrapPolicy({Embeddings, Block, Head}),
              sharding_strategy=ShardingStrategy[kind],
              device_id=ctx.device,  # torch.device("cpu") runs on gloo
              use_orig_params=False)
    if bf16:
        kw["mixed_precision"] = MixedPrecision(param_dtype=torch.bfloat16,
                                               reduce_dtype=torch.float32)
    if kind == "HYBRID_SHARD":
        kw["device_mesh"] = _mesh(ctx, shard_group)
    return FSDP(model, **kw)


def autocast(ctx, strategy: str, bf16: bool):
    """bf16 autocast for DDP; FSDP casts through its mixed-precision policy."""
    if bf16 and strategy == "ddp":
        return torch.autocast(ctx.device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
