"""A layout's memory under a named framework: the ledger's stage, plus
what the framework allocates beside it and the runtime floor (pure
Python).

    python -m labkit plan --params 70e9 --gpus 16 --gpu h100-80gb \
        --batch 64 --framework deepspeed
    python -m labkit plan --hf-config qwen3-30b-a3b.json --gpus 8 \
        --gpu h100-80gb --batch 64 --framework megatron
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
A mixture of experts' layouts (:mod:`labkit.predict.choosing.plan_moe`)
are priced by :func:`moe_terms`: the same frameworks, each with what it
allocates for the experts over the expert-data-parallel group.
"""
from __future__ import annotations

import functools

GB = 1e9
from labkit.predict.memory.floor import floor, headroom_sentence
from labkit.predict.memory.frameworks import (DEEPSPEED_DEFAULTS, DS,
                                              FRAMEWORKS, FSDP_SRC, Term,
                                              record_sizes)
from labkit.predict.memory.frameworks import terms as framework_terms

__all__ = ["FRAMEWORKS", "ZERO_NAMES", "moe_price", "moe_terms", "moe_zero",
           "real_terms"]


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


# -- a mixture of experts (labkit.predict.choosing.plan_moe's layouts) -------

TORCHTITAN_EP = ("torchtitan/models/llama4/infra/parallelize.py: "
                 "apply_fsdp, fully_shard(transformer_block.moe.experts, "
                 "mesh=dp_mod_ep_mesh)")


ZERO_NAMES = {1: "ZeRO-1", 2: "FSDP (ZeRO-2)", 3: "FSDP (ZeRO-3)"}


def moe_zero(framework: str, pp: int) -> int:
    """The ZeRO stage ``framework`` runs a mixture of experts' layout at.
    Megatron's distributed optimizer and DeepSpeed's MoE: 1, the
    ledger's. FSDP shards weights and gradients too, the experts over the
    expert-data-parallel ranks: 3 (``FULL_SHARD``), or 2 with a pipeline,
    where torchtitan keeps a stage's weights unsharded from forward to
    backward (``apply_fsdp``: ``reshard_after_forward_policy``
    "default" is False with PP, "to avoid per-microbatch all-gathers";
    ``torchtitan/models/llama4/infra/parallelize.py``)."""
    if framework in ("fsdp2", "fsdp1"):
        return 3 if pp == 1 else 2
    return 1


def moe_terms(framework: str, *, dense: float, experts: float,
              unit: float, reps: int, ep: int, zero: int = 1,
              knobs: dict | None = None) -> list[Term]:
    """What ``framework`` adds on one GPU to a mixture of experts'
    ZeRO-1 layout (:func:`labkit.predict.choosing.plan_moe.layout`), whose
    ledger shards the non-expert optimizer states over ``reps`` (``dp x
    cp``) ranks and the experts' over the expert-data-parallel group of
    ``reps / ep`` ranks. ``dense`` / ``experts``: this GPU's non-expert and
    routed-expert parameters; ``unit``: its largest FSDP unit (a layer's
    non-expert weights, a layer's local experts, or an end).

    - ``deepspeed`` (ZeRO-1; DeepSpeed's own MoE refuses ZeRO-3,
      ``engine.py: _validate_zero3_moe_compatibility``): the fp32
      gradient partition (the 18/N of its estimator) of each parameter
      group over that group's ranks -- an expert group's partition count
      is the expert-data-parallel group's size
      (``stage_1_and_2.py: _configure_moe_settings``) -- and the reduce
      bucket.
    - ``megatron`` (the distributed optimizer): the fp32 ``main_grad`` of
      every parameter, the experts' in buffers of their own over the
      expert-data-parallel group (``distributed_data_parallel.py:
      expert_parallel_buffers``).
    - ``fsdp2`` / ``fsdp1`` (``zero``: :func:`moe_zero`): the unit being
      computed (ZeRO-3), the prefetched one and the unit's fp32 reduce,
      as for a dense layout; a layer's experts are a unit of their own,
      sharded over the expert-data-parallel ranks (torchtitan).
    """
    if framework not in FRAMEWORKS:
        raise ValueError(f"--framework must be one of "
                         f"{', '.join(FRAMEWORKS)}, got {framework!r}")
    edp = reps // ep
    if framework == "ledger":
        return []
    if framework == "deepspeed":
        k = {**DEEPSPEED_DEFAULTS, **(knobs or {})}
        est = (f"{DS}stage_1_and_2.py: single_partition_of_fp32_groups"
               " .grad (estimate_zero2_model_states_mem_needs: 18/N)")
        return [Term("fp32 grads, non-expert (over DP x CP)",
                     4 * dense / reps, 0.0, est),
                Term("fp32 grads, experts (over the expert-DP group)",
                     4 * experts / edp, 0.0,
                     f"{DS}stage_1_and_2.py: _configure_moe_settings, "
                     "partition_count = expert_dp_process_group size"),
                Term("reduce bucket", k["reduce_bucket_size"] * 2, 0.0,
                     f"{DS}stage_1_and_2.py: setup_buckets")]
    if framework == "megatron":
        src = "megatron/core/distributed/distributed_data_parallel.py: "
        return [Term("main_grad in fp32, non-expert", 2 * dense, 0.0,
                     src + "buffers (param_and_grad_buffer.py); docs: "
                     "distributed optimizer, 6 + 12/d B/param"),
                Term("main_grad in fp32, experts", 2 * experts, 0.0,
                     src + "expert_parallel_buffers, over "
                     "get_expert_data_parallel_group()")]
    src = f"{FSDP_SRC[framework]}; {TORCHTITAN_EP}"
    return ([Term("unsharded unit", 2 * unit, 0.0, src)] if zero == 3
            else []) + [
        Term("prefetched unit", 2 * unit, 0.0, src),
        Term("unit gradient, fp32 reduce_dtype", 4 * unit, 0.0, src)]


def _moe_real_terms(framework: str, *, dense: float, experts: float,
                    unit: float, reps: int, ep: int, zero: int, gpus: int,
                    allocated: float) -> dict:
    """:func:`real_terms` for a mixture of experts' layout: ``{"framework":
    bytes, "floor": bytes, "terms": [...]}``. The floor counts a ring
    (the non-expert gradients', or TP's and PP's), a second for the
    experts' gradients when the expert-data-parallel group has more than
    one rank, and the all-to-all's ``ep - 1`` peers."""
    ts = moe_terms(framework, dense=dense, experts=experts, unit=unit,
                   reps=reps, ep=ep, zero=zero)
    added = sum(t.gpu for t in ts)
    peers = 2 + (2 if reps // ep > 1 else 0) if gpus > 1 else None
    fl = floor(gpus, peers=peers, allocated=allocated + added,
               a2a_peers=ep - 1)
    return {"framework": added, "floor": fl["total"],
            "terms": [t.as_dict() for t in ts] + [
                {"name": n, "gpu": b, "cpu": 0.0, "source": s,
                 "bound": False} for n, b, s in fl["terms"]]}


def moe_price(framework: str, *, dense: float, experts: float,
              unit: float, reps: int, ep: int, gpus: int, allocated: float,
              memory: float, reserve: float, zero: int = 1) -> dict:
    """One GPU of a mixture of experts' layout under ``framework``: the
    ledger's ``allocated`` bytes, the framework's terms and the floor
    (:func:`moe_terms`), against ``memory``. ``fits``, ``reason`` (empty
    when it fits; else the overshoot, and whether the ledger with its
    flat ``reserve`` would have fitted), ``verdict`` (the headroom
    sentence) and the terms, in GB."""
    real = _moe_real_terms(framework, dense=dense, experts=experts,
                           unit=unit, reps=reps, ep=ep, zero=zero,
                           gpus=gpus, allocated=allocated)
    need = allocated + real["framework"] + real["floor"]
    verdict = headroom_sentence(need, memory)
    fits = need <= memory
    reason = ""
    if not fits:
        reason = verdict
        if allocated + reserve <= memory:
            reason += (f"; the ledger with --reserve-gb fits "
                       f"({(allocated + reserve) / GB:.1f} GB), not "
                       f"{framework}'s terms and the floor")
    return {"fits": fits, "reason": reason, "framework": framework,
            "framework_gb": real["framework"] / GB,
            "floor_gb": real["floor"] / GB, "need_gb": need / GB,
            "headroom_gb": (memory - need) / GB, "verdict": verdict,
            "ledger_gb": (allocated + reserve) / GB,
            "terms": real["terms"]}
