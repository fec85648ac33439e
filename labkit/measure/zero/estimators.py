"""DeepSpeed's memory estimators, written as the ledger plus named terms.

    rows = estimator_rows(total_params, largest_layer_params, gpus_per_node=8)
    terms = ledger_terms(rows["rows"][0], total_params, largest, 8)

DeepSpeed's estimators
----------------------
DeepSpeed ships two "cold" estimators that print a small table
(``deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_model_states_mem_
needs_all_cold`` and ``...stage3.estimate_zero3_model_states_mem_needs_all_
cold``). :func:`estimator_rows` runs them, keeps their printed text, and
returns their exact byte counts (from the helper functions the printers
call). :func:`ledger_terms` writes each DeepSpeed estimate as
``labkit``'s ledger plus named terms -- the 4 bytes of fp32 gradients per
parameter in their 18, the largest-layer term, the 1.5 buffer factor, the
full fp32 model every process loads -- so that the difference is explained,
not guessed; ``tests/test_measure_zero.py`` asserts each term against the
installed DeepSpeed. Their "GB" is GiB (they divide by 2**30); the ledger's
GB is 1e9 bytes.
"""
from __future__ import annotations

import contextlib
import io
import re

import torch

GIB = 2 ** 30


def _ds_estimators():
    """DeepSpeed's two estimator modules, imported without its "Setting
    accelerator to CPU" warning (the estimators are formulas; no device)."""
    import logging
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        from deepspeed.runtime.zero import stage3, stage_1_and_2
    finally:
        logging.disable(previous)
    return stage_1_and_2, stage3


def deepspeed_defaults() -> dict:
    """DeepSpeed's own defaults for the knobs ``ZeroConfig`` writes, read
    from the installed package (``DeepSpeedZeroConfig``'s fields, and
    ``GRADIENT_CLIPPING_DEFAULT``), under their JSON names."""
    _ds_estimators()   # imports deepspeed quietly
    from deepspeed.runtime.constants import GRADIENT_CLIPPING_DEFAULT
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.zero.offload_config import (
        DeepSpeedZeroOffloadOptimizerConfig)
    out = {}
    for name, field in DeepSpeedZeroConfig.model_fields.items():
        if name in ("contiguous_gradients", "reduce_bucket_size",
                    "allgather_bucket_size", "overlap_comm",
                    "use_multi_rank_bucket_allreduce", "prefetch_bucket_size",
                    "param_persistence_threshold", "max_live_parameters",
                    "max_reuse_distance"):
            d = field.default
            out[field.alias or name] = d if d is None or isinstance(
                d, bool) else int(d)
    out["gradient_clipping"] = GRADIENT_CLIPPING_DEFAULT
    out["pin_memory"] = DeepSpeedZeroOffloadOptimizerConfig.model_fields[
        "pin_memory"].default
    return out


def estimator_rows(total_params: int, largest_layer_params: int,
                   gpus_per_node: int = 1, nodes: int = 1,
                   buffer_factor: float = 1.5) -> dict:
    """DeepSpeed's ZeRO-2 and ZeRO-3 estimates for a model and cluster.

    Runs ``estimate_zero2_model_states_mem_needs_all_cold`` and
    ``estimate_zero3_model_states_mem_needs_all_cold`` (which only print)
    and returns ``{"text": what they printed, "rows": [...]}``; each row has
    ``stage``, ``offload_optimizer``, ``offload_param``, ``zero_init``
    (ZeRO-3) and the exact ``gpu_bytes`` / ``cpu_bytes`` of the helper the
    printer calls (``estimate_zero{2,3}_model_states_mem_needs``), with the
    GiB the table printed for them (``gpu_gib_printed``, ...).
    """
    z2, z3 = _ds_estimators()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        z2.estimate_zero2_model_states_mem_needs_all_cold(
            total_params=total_params, num_gpus_per_node=gpus_per_node,
            num_nodes=nodes, additional_buffer_factor=buffer_factor)
        z3.estimate_zero3_model_states_mem_needs_all_cold(
            total_params=total_params,
            largest_layer_params=largest_layer_params,
            num_gpus_per_node=gpus_per_node, num_nodes=nodes,
            additional_buffer_factor=buffer_factor)
    text = buf.getvalue()
    printed = [(float(c), float(g)) for c, g in re.findall(
        r"^\s*([\d.]+)GB \|\s*([\d.]+)GB \|", text, flags=re.M)]
    rows = []
    for off in (True, False):   # the order the printers use
        cpu, gpu = z2.estimate_zero2_model_states_mem_needs(
            total_params=total_params, num_gpus_per_node=gpus_per_node,
            num_nodes=nodes, cpu_offload=off,
            additional_buffer_factor=buffer_factor)
        rows.append(dict(stage=2, offload_optimizer=off, offload_param=False,
                         zero_init=None, gpu_bytes=gpu, cpu_bytes=cpu))
    for off_opt in (True, False):
        for off_par in (True, False):
            if off_par and not off_opt:
                continue
            for zero_init in (True, False):
                cpu, gpu, _ = z3.estimate_zero3_model_states_mem_needs(
                    total_params=total_params,
                    largest_layer_params=largest_layer_params,
                    num_gpus_per_node=gpus_per_node, num_nodes=nodes,
                    cpu_offload=off_opt, cpu_offload_params=off_par,
                    zero_init=zero_init,
                    additional_buffer_factor=buffer_factor)
                rows.append(dict(stage=3, offload_optimizer=off_opt,
                                 offload_param=off_par, zero_init=zero_init,
                                 gpu_bytes=gpu, cpu_bytes=cpu))
    for row, (cpu_gib, gpu_gib) in zip(rows, printed):
        row["cpu_gib_printed"], row["gpu_gib_printed"] = cpu_gib, gpu_gib
    return {"text": text, "rows": rows}


def largest_layer_params(model: torch.nn.Module) -> int:
    """DeepSpeed's "largest layer": most parameters directly in one module
    (``deepspeed.runtime.zero.stage3.model_to_params``)."""
    return max((sum(p.numel() for p in m.parameters(recurse=False))
                for m in model.modules()), default=0)


def ledger_terms(row: dict, total_params: float, largest_layer: float,
                 gpus_per_node: int, nodes: int = 1,
                 buffer_factor: float = 1.5) -> dict:
    """One DeepSpeed estimate written as the ledger plus named terms.

    The ledger is ``labkit.predict.memory.ledger`` for mixed-precision Adam
    (2 + 2 + 12 bytes per parameter) on N = ``gpus_per_node * nodes``
    ranks. Returns ``{"gpu": {...}, "cpu": {...}}``, each ``{"ledger": ..,
    <term>: .., "deepspeed": ..}`` with ledger + terms = DeepSpeed's number
    (up to the ``int()`` DeepSpeed rounds with). DeepSpeed's CPU figure is
    per *node* (one host serves its GPUs), so the ledger's per-rank CPU
    bytes are multiplied by the GPUs of a node.

    The terms are :func:`labkit.predict.memory.frameworks.deepspeed_terms`'
    (pure formulas, the ones ``memory --framework deepspeed`` prints):
    ``fp32_grads``, ``largest_layer``, ``fp32_model_per_process``,
    ``not_divided_by_nodes`` and ``buffer``; this function adds their
    sum under ``deepspeed`` for the tests to hold to the estimator.
    """
    from labkit.predict.memory.frameworks import deepspeed_terms
    d = deepspeed_terms(row["stage"], total_params, largest_layer,
                        gpus_per_node, nodes, row["offload_optimizer"],
                        row["offload_param"], row["zero_init"] is not False,
                        buffer_factor)
    gpu, cpu = d["gpu"], d["cpu"]
    gpu["deepspeed"] = sum(gpu.values())
    cpu["deepspeed"] = sum(cpu.values())
    return {"gpu": gpu, "cpu": cpu}


# What DeepSpeed's documentation prints for its ZeRO-2 example: 2851M
# parameters (t5-3b), one node of 8 GPUs. docs/code-docs/source/memory.rst
# in deepspeedai/DeepSpeed (https://deepspeed.readthedocs.io/en/latest/
# memory.html), "API To Estimate Memory Usage". Columns: offload, per CPU
# GB, per GPU GB as printed (GiB).
DOC_ZERO2_EXAMPLE = {
    "total_params": 2851e6, "gpus_per_node": 8, "nodes": 1,
    "rows": [("offload_optimizer=cpu", 127.45, 5.31),
             ("offload_optimizer=none", 127.45, 15.93)],
    # the formula the same page gives under "Discussion", GPU RAM, ZeRO-2,
    # offload none: 4 * params + 16 * params / (total number of gpus)
    "doc_formula": "4 * params + 16 * params / gpus",
}
# The ZeRO-3 example on the same page (largest layer 32M) still matches.
DOC_ZERO3_EXAMPLE = {
    "total_params": 2851e6, "largest_layer_params": 32e6,
    "gpus_per_node": 8, "nodes": 1,
    "rows": [(71.69, 0.12), (127.45, 0.12), (63.72, 0.78), (127.45, 0.78),
             (1.43, 6.09), (127.45, 6.09)],
}
