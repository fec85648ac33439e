"""A layout's memory under a named framework: the ledger's stage, plus
what the framework allocates beside it and the runtime floor (pure
Python).

    python -m labkit plan --params 70e9 --gpus 16 --gpu h100-80gb \
        --batch 64 --framework deepspeed
    from labkit.predict.choosing.framework_cost import real_terms

The planner's own price of a stage (:func:`labkit.predict.choosing
.layout_cost.stage_memory`) is the ZeRO ledger, ZeRO-3's two gathered
layers and a flat ``--reserve-gb``. With ``--framework`` the last two give
way to the framework's own terms
(:func:`labkit.predict.memory.frameworks.terms`: DeepSpeed's fp32 gradient
partition, reduce bucket and largest layer; FSDP's unsharded, prefetched
and fp32-reduced units; Megatron's fp32 ``main_grad``) and the runtime
floor (:func:`labkit.predict.memory.floor.floor`: CUDA context, NCCL
buffers, cuBLAS workspace, allocator slack), the same terms ``labkit
memory --framework`` prints. A tensor-parallel rank holds ``1 / tp`` of
each layer, so the layer- and unit-sized terms are divided by ``tp``.
"""
from __future__ import annotations

import functools

from labkit.predict.memory.floor import floor
from labkit.predict.memory.frameworks import FRAMEWORKS, record_sizes
from labkit.predict.memory.frameworks import terms as framework_terms

__all__ = ["FRAMEWORKS", "real_terms"]


@functools.lru_cache(maxsize=8)
def _sizes(arch) -> dict:
    return record_sizes(arch)


def real_terms(framework: str, arch, stage_params: float, lay,
               precision: str, allocated: float,
               gpus_per_node: int = 8) -> dict:
    """``{"framework": bytes, "floor": bytes, "terms": [...], "error":
    ""}`` for one GPU of the layout ``lay``; ``allocated``: the stage's
    bytes before them (the slack is a fraction of the peak). A layout the
    framework does not run (Megatron with ZeRO-2/3, DeepSpeed outside
    mixed precision) gets its one-line reason in ``error``."""
    sizes = {k: v / lay.tp for k, v in _sizes(arch).items()}
    try:
        ts = framework_terms(
            framework, ledger_strategy=lay.strategy, params=stage_params,
            gpus=lay.dp * lay.cp, gpus_per_node=gpus_per_node,
            offload=lay.offload, precision=precision, **sizes)
    except ValueError as e:
        return {"framework": 0.0, "floor": 0.0, "terms": [],
                "error": str(e).replace("--stage 0", "ddp").replace(
                    "--stage 1", "zero1")}
    added = sum(t.gpu for t in ts if not t.bound)
    gpus = lay.tp * lay.pp * lay.dp * lay.cp
    fl = floor(gpus, allocated=allocated + added)
    return {"framework": added, "floor": fl["total"],
            "terms": [t.as_dict() for t in ts] + [
                {"name": n, "gpu": b, "cpu": 0.0, "source": s,
                 "bound": False} for n, b, s in fl["terms"]],
            "error": ""}
