"""DeepSpeed's own tensors, counted; and DeepSpeed's memory estimators.

    measured = state_bytes(engine)          # inside a rank, any ZeRO stage
    measured["params"], measured["grads"], measured["optimizer"], ...
    rows = estimator_rows(total_params, largest_layer_params, gpus_per_node=8)

Where DeepSpeed keeps model states
----------------------------------
:func:`labkit.measure.memory.model_state_bytes` walks ``model.parameters()``
and ``optimizer.state``. That is not enough for DeepSpeed: its ZeRO
optimizers hold the states in their own attributes (DeepSpeed 0.19.8,
``deepspeed/runtime/zero/stage_1_and_2.py`` and ``stage3.py``):

=================  ===================================  ====================
what               ZeRO-1/2 (DeepSpeedZeroOptimizer)    ZeRO-3 (..._Stage3)
=================  ===================================  ====================
weights            ``bit16_groups_flat``: every weight,  ``ds_tensor`` of each
                   one flat buffer per group (the        parameter: this rank's
                   module's parameters are views)        partition (in
                                                         ``fp16_partitioned_
                                                         groups_flat``); full
                                                         data only while
                                                         gathered, or always
                                                         for *persistent*
                                                         small parameters
master weights     ``single_partition_of_fp32_groups``   ``fp32_partitioned_
(fp32 partition)                                         groups_flat``
gradients          ``averaged_gradients`` /              ``grad_partitions_
                   ``grads_in_partition``; full          flat_buffer``
                   ``param.grad`` until reduced
Adam moments       ``optimizer.state`` of the inner      same
                   torch optimizer (over the partition)
=================  ===================================  ====================

:func:`state_bytes` collects those tensors (and every other tensor it finds
on the engine's optimizer, so nothing hides), charges each storage once
(:func:`labkit.measure.memory.unique_bytes`) and splits the bytes by device:
``gpu`` for an accelerator, ``cpu`` for host memory. On the CPU profile
every tensor lives in host memory, so offload moves nothing there; the
split only means something on a GPU.

Under fp32 (the CPU profile) DeepSpeed's ZeRO-1/2/3 optimizers still keep
the fp32 "master" partition as a *copy* of the weights, so each rank holds
4 Phi / N bytes more than the fp32 ledger's 4 + 4 + 8; ZeRO-0 runs the torch
optimizer directly and has no copy. Under bf16 the copy is the ledger's own
master weights (K = 12 = 4 + 8).

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

from labkit.measure.memory import unique_bytes

GIB = 2 ** 30

# Attribute names of DeepSpeed 0.19.8's ZeRO optimizers, by what they hold.
# Anything else found on the optimizer goes to "other" and is shown.
_ATTRS = {
    "params": (
        "bit16_groups_flat", "bit16_groups",
        "parallel_partitioned_bit16_groups",
        "round_robin_bit16_groups", "round_robin_bit16_meta",
        "fp16_partitioned_groups_flat", "fp16_partitioned_groups",
        "lp_param_buffer", "persistent_parameters",
        "param_groups_fp16_flat_cpu_memory", "fp16_groups",
        "fp16_groups_flat",
        "bf16_groups", "bf16_groups_flat", "bf16_partitioned_groups"),
    "master": (
        "single_partition_of_fp32_groups", "fp32_partitioned_groups_flat",
        "fp32_groups_flat_partition", "fp32_groups_flat", "fp32_groups"),
    "grads": (
        "averaged_gradients", "grads_in_partition",
        "grad_partitions_flat_buffer",
        "_DeepSpeedZeroOptimizer_Stage3__param_id_to_grad_partition",
        "offload_gradient_dict", "fp32_groups_gradients",
        "fp32_groups_gradients_flat", "fp32_groups_gradient_flat_partition",
        "fp32_groups_actual_gradients_flat", "averaged_gradients_on_cpu"),
    "buffers": (
        "ipg_buffer", "ipg_buckets", "temp_grad_buffer_for_cpu_offload",
        "temp_grad_buffer_for_gpu_offload",
        "param_buffer_of_bit16_for_cpu_offload_groups",
        "__ipg_bucket_flat_buffer", "grads_in_ipg_bucket"),
}
CATEGORIES = ("params", "grads", "optimizer", "buffers", "other")


def _device_key(t: torch.Tensor) -> str:
    return "cpu" if t.device.type == "cpu" else "gpu"


def _tensors_in(obj, depth: int = 0):
    """Every tensor inside nested lists, tuples, dicts (and their keys)."""
    if depth > 6:
        return
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple, set)):
        for x in obj:
            yield from _tensors_in(x, depth + 1)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(k, torch.Tensor):
                yield k
            yield from _tensors_in(v, depth + 1)
    elif hasattr(obj, "__dict__") and type(obj).__name__ in (
            "IPGBucket", "_IPGBucket"):   # DeepSpeed's bucket objects
        yield from _tensors_in(vars(obj), depth + 1)


def _storage_key(t: torch.Tensor):
    s = t.untyped_storage()
    return (s.data_ptr(), t.device) if s.nbytes() else ("empty", id(s))


class _Ledger:
    """Storages already charged, and the bytes of each category x device."""

    def __init__(self):
        self.seen: set = set()
        self.bytes = {c: {"gpu": 0, "cpu": 0} for c in CATEGORIES}
        self.names: dict[str, int] = {}

    def charge(self, category: str, tensors, name: str) -> None:
        for t in tensors:
            if t is None or not isinstance(t, torch.Tensor) or t.is_meta:
                continue
            key = _storage_key(t)
            if key in self.seen:
                continue
            self.seen.add(key)
            n = unique_bytes([t])
            self.bytes[category][_device_key(t)] += n
            self.names[name] = self.names.get(name, 0) + n


def _inner_optimizer(opt):
    """The torch optimizer that owns the Adam moments."""
    inner = getattr(opt, "optimizer", None)
    return inner if isinstance(inner, torch.optim.Optimizer) else opt


def state_bytes(engine) -> dict:
    """Model-state bytes this rank holds now, by category and device.

    Returns ``{"params": {"gpu": b, "cpu": b}, "grads": ..., "optimizer":
    ... (fp32 master partition + Adam moments), "buffers": ... (DeepSpeed's
    reduce buckets and offload staging), "other": ... (anything else on the
    optimizer: norms, flags), "master": bytes of the fp32 master copy (part
    of "optimizer"), "optimizer_counters": Adam's step counters,
    "persistent_params": ZeRO-3 parameters kept whole on every rank,
    "by_attribute": {attribute: bytes}, "total": params + grads +
    optimizer (all devices)}``.
    """
    module = engine.module
    opt = engine.optimizer
    inner = _inner_optimizer(opt)
    led = _Ledger()

    # 1. weights: the module's parameters (views into DeepSpeed's flat
    # buffers at ZeRO-1/2; ZeRO-3: the gathered data, empty when released,
    # and the partition ds_tensor)
    params = list(module.parameters())
    persistent = [p for p in params if getattr(p, "ds_persist", False)]
    led.charge("params", (p.data for p in params), "module.parameters")
    led.charge("params", (getattr(p, "ds_tensor", None) for p in params),
               "param.ds_tensor")
    # 2. master weights: the inner optimizer's parameters, when they are not
    # the module's own (ZeRO-0 under fp32 steps the module's weights)
    master_before = sum(led.bytes["optimizer"].values())
    led.charge("optimizer", (p for g in inner.param_groups
                             for p in g["params"]), "optimizer.param_groups")
    # 3. gradients: the module's .grad and the master partition's .grad
    led.charge("grads", (p.grad for p in params), "param.grad")
    led.charge("grads", (p.grad for g in inner.param_groups
                         for p in g["params"]), "master.grad")
    # 4. Adam's moments (step counters apart, as measure.memory does)
    states, counters = [], []
    for st in inner.state.values():
        for k, v in st.items():
            if isinstance(v, torch.Tensor):
                (counters if k == "step" else states).append(v)
    led.charge("optimizer", states, "optimizer.state")
    counter_bytes = unique_bytes(counters)
    # 5. DeepSpeed's own attributes, by name, then everything else
    attrs = vars(opt) if opt is not inner else {}
    for cat, names in _ATTRS.items():
        for name in names:
            if name in attrs:
                target = "optimizer" if cat == "master" else cat
                led.charge(target, _tensors_in(attrs[name]), name)
    master = sum(led.bytes["optimizer"].values()) - master_before \
        - unique_bytes(states)
    for name, value in attrs.items():
        if isinstance(value, torch.optim.Optimizer):
            continue
        led.charge("other", _tensors_in(value), name)
    out = {c: dict(v) for c, v in led.bytes.items()}
    out["master"] = max(master, 0)
    out["optimizer_counters"] = counter_bytes
    out["persistent_params"] = unique_bytes(p.data for p in persistent)
    out["by_attribute"] = dict(led.names)
    out["total"] = sum(sum(out[c].values())
                       for c in ("params", "grads", "optimizer"))
    return out


def flat(measured: dict) -> dict:
    """``{params, grads, optimizer, buffers, other, total}`` summed over
    devices, plus ``*_gpu`` / ``*_cpu`` (for tables and JSON)."""
    out = {}
    for c in CATEGORIES:
        out[c] = sum(measured[c].values())
        out[f"{c}_gpu"] = measured[c]["gpu"]
        out[f"{c}_cpu"] = measured[c]["cpu"]
    for k in ("master", "optimizer_counters", "persistent_params", "total"):
        out[k] = measured[k]
    out["gpu_total"] = sum(measured[c]["gpu"]
                           for c in ("params", "grads", "optimizer"))
    out["cpu_total"] = sum(measured[c]["cpu"]
                           for c in ("params", "grads", "optimizer"))
    return out


def at_end_of_backward(engine, callback):
    """Call ``callback()`` each time autograd's backward has finished and
    before DeepSpeed's end-of-backward reduction runs.

    That is the moment the most gradient bytes are alive: ZeRO-0/1 still
    hold every full gradient, ZeRO-2/3 their partition plus the last,
    not yet reduced bucket (``reduce_bucket_size``). DeepSpeed 0.19.8 runs
    that reduction in ``engine._backward_epilogue``; this wraps it on the
    one engine instance (nothing else changes). Returns an undo function.
    """
    original = engine._backward_epilogue

    def epilogue(*args, **kwargs):
        callback()
        return original(*args, **kwargs)

    engine._backward_epilogue = epilogue

    def undo():
        engine._backward_epilogue = original
    return undo


def expected_bytes(cfg: dict, numels: list[int], world_size: int,
                   no_grad_input_numels: list[int] = ()) -> dict:
    """The ledger for a DeepSpeed run, plus the terms DeepSpeed adds.

    ``cfg`` is a :class:`labkit.zero_config.ZeroConfig` as a dict,
    ``numels`` the sizes of the model's parameters in order, and
    ``no_grad_input_numels`` those of modules whose input carries no
    gradient (the token embeddings). For the snapshot taken at the end of
    backward (:func:`at_end_of_backward`), each category is ``{"ledger":
    labkit.predict.memory.ledger, <term>: bytes, ..., "expected": ledger +
    terms, "slack": bytes}``: the measured value lies in ``[expected,
    expected + slack]``. Terms (DeepSpeed 0.19.8):

    - ``padding``: ZeRO-1/2 flatten all weights into one buffer padded to
      a multiple of 2 N elements (``nccl_start_alignment_factor`` x N);
      ZeRO-3 pads every parameter to a multiple of N before cutting it.
    - ``master_copy`` (fp32 runs): ZeRO-1/2/3 keep their fp32 master
      partition as a copy even when the weights are fp32 already, 4 bytes
      per parameter / N that the fp32 ledger (4 + 4 + 8) has no line for.
      (Under bf16 it is the ledger's own K = 12 = 4 + 8.)
    - ``persistent`` (ZeRO-3): parameters with at most
      ``stage3_param_persistence_threshold`` elements stay whole on every
      rank (``mark_persistent_parameters`` in ``parameter_offload.py``),
      on top of their partition.
    - ``inputs_without_grad`` (ZeRO-3): a module whose input needs no
      gradient (the embeddings, fed token ids) never triggers DeepSpeed's
      post-backward release hook; its gathered weights are freed with
      everything else right after backward (``partition_all_parameters``).
    - slack for ``grads`` (ZeRO-2/3): the last gradient bucket, not yet
      reduced when autograd ends: at most ``reduce_bucket_size`` elements
      plus one parameter; ZeRO-2 also keeps, until the step, the whole
      gradient of a parameter that its partition boundary cuts.
    """
    from labkit.predict.memory import ledger as _ledger
    n = world_size
    stage = cfg["stage"]
    e = 2 if cfg["precision"] in ("bf16", "fp16") else 4
    phi = sum(numels)
    offload = ("params" if cfg["offload_param"] != "none" else
               "optimizer" if cfg["offload_optimizer"] != "none" else "none")
    led = _ledger(phi, n, f"zero{stage}",
                  precision="fp32" if e == 4 else "mixed", optimizer="adam",
                  offload=offload)
    out = {"params": {"ledger": led.params_gpu + led.params_cpu},
           "grads": {"ledger": led.grads_gpu + led.grads_cpu},
           "optimizer": {"ledger": led.optimizer_gpu + led.optimizer_cpu}}
    if stage in (1, 2):
        align = 2 * n
        padded = -(-phi // align) * align
    elif stage == 3:
        padded = sum(-(-k // n) * n for k in numels)
    else:
        padded = phi
    pad = padded - phi
    if stage in (1, 2):
        out["params"]["padding"] = e * pad
    if stage >= 2:
        out["grads"]["padding"] = e * pad / n
    if stage == 3:
        out["params"]["padding"] = e * pad / n
    if stage >= 1:
        out["optimizer"]["padding"] = 12 * pad / n if e == 2 else 8 * pad / n
        if e == 4:
            out["optimizer"]["master_copy"] = 4 * padded / n
    if stage in (1, 2) and e == 2 and offload == "optimizer":
        # ZeRO-Offload reduces the 16-bit gradients into the fp32 master
        # partition's own .grad on the host (``master.grad``): 4 bytes per
        # parameter / N, where the ledger's 16-bit gradients count 2.
        out["grads"]["fp32_partition"] = (4 * padded - e * phi) / n
        out["grads"].pop("padding", None)
    if stage == 3:
        thr = cfg["stage3_param_persistence_threshold"]
        persistent = [k for k in numels if k <= thr]
        out["params"]["persistent"] = e * sum(persistent)
        out["params"]["inputs_without_grad"] = e * sum(
            k for k in no_grad_input_numels if k > thr)
    for cat in out.values():
        cat["expected"] = sum(cat.values())
        cat["slack"] = 0
    for cat, gpu in (("params", led.params_gpu), ("grads", led.grads_gpu),
                     ("optimizer", led.optimizer_gpu)):
        out[cat]["ledger_gpu"] = gpu   # the GPU's share (offload: less)
    if stage >= 2:
        out["grads"]["slack"] = e * (cfg["reduce_bucket_size"] + max(numels))
        if stage == 2:
            out["grads"]["slack"] += e * max(numels)
    return out


def volume_units(records, params: float) -> float:
    """ZeRO communication volume of counted collectives, in units of Phi.

    ``labkit.predict.sharding.units_of_phi``, which counts DeepSpeed's
    ZeRO-1/2 reduce-to-owner path (``use_multi_rank_bucket_allreduce:
    false``: N ``dist.reduce`` of Phi/N elements) as 1 per element, like
    the reduce-scatter it replaces.
    """
    from labkit.predict.sharding import units_of_phi
    return units_of_phi(records, params)


# -- DeepSpeed's estimators ---------------------------------------------------

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
