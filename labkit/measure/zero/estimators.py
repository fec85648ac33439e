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

    The terms (``estimate_zero2_model_states_mem_needs`` in
    ``deepspeed/runtime/zero/stage_1_and_2.py``, ``estimate_zero3_...`` in
    ``stage3.py``, DeepSpeed 0.19.8):

    - ``fp32_grads``: DeepSpeed's 18 bytes per parameter (ZeRO-2: 2 fp16
      grads + 4 fp32 grads + 4 fp32 weights + 8 Adam; ZeRO-3: 2 fp16
      weights + 4 fp32 grads + 4 + 8) and its 16 under offload (4 + 4 + 4
      + 4) count the gradient partition in fp32, as it is when the
      optimizer steps; the ledger's 16 = 2 + 2 + 12 counts it in 16 bits.
    - ``largest_layer``: ZeRO-3 gathers one layer's fp16 weights and
      computes its fp16 gradients at a time: 4 bytes x its parameters.
    - ``fp32_model_per_process``: every process of a node first builds
      the whole model in fp32 on the host (4 bytes x params x processes),
      unless ``zero.Init`` builds it partitioned; DeepSpeed takes the
      larger of that and the offloaded states.
    - ``not_divided_by_nodes``: ZeRO-2 offload's CPU estimate is not
      divided by the number of nodes (ZeRO-3's is).
    - ``buffer``: CPU figures are multiplied by ``buffer_factor`` (1.5).
    """
    from labkit.predict.memory import ledger as _ledger
    g, k = gpus_per_node, nodes
    n = g * k
    psi, big, f = float(total_params), float(largest_layer), buffer_factor
    stage, off_opt, off_par = (row["stage"], row["offload_optimizer"],
                               row["offload_param"])
    offload = "params" if off_par else ("optimizer" if off_opt else "none")
    led = _ledger(psi, n, f"zero{stage}", precision="mixed",
                  optimizer="adam", offload=offload)
    gpu = {"ledger": led.gpu_total}
    cpu = {"ledger": led.cpu_total * g}
    # -- GPU --------------------------------------------------------------
    if stage == 2 and not off_opt:
        gpu["fp32_grads"] = 4 * psi / n          # 2 + 18/N vs 2 + 14/N
    if stage == 3:
        gpu["largest_layer"] = 4 * big
        if not off_opt:
            gpu["fp32_grads"] = 2 * psi / n      # 18/N vs 16/N
    # -- CPU (per node), before the buffer factor ---------------------------
    if not off_opt:          # nothing offloaded: host memory to build it
        built = big if (stage == 3 and row["zero_init"]) else psi
        cpu["fp32_model_per_process"] = 4 * built * g
    else:
        if stage == 2:       # psi * max(4 * N, 16): N = all GPUs
            states, model = 16 * psi, 4 * n * psi
        else:                # psi * max(4 g, 16/k or 18/k) without zero.Init
            states = (18 if off_par else 16) * psi / k
            model = 0 if row["zero_init"] else 4 * g * psi
        if model > states:
            cpu["fp32_model_per_process"] = model - cpu["ledger"]
        else:
            per_node = states if stage == 3 else 16 * psi / k
            cpu["fp32_grads"] = per_node - cpu["ledger"]
            if stage == 2 and k > 1:
                cpu["not_divided_by_nodes"] = states - per_node
    unbuffered = sum(cpu.values())
    cpu["buffer"] = (f - 1) * unbuffered
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
