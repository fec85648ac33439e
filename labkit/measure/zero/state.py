"""DeepSpeed's own tensors, counted, storage by storage.

    measured = state_bytes(engine)          # inside a rank, any ZeRO stage
    measured["params"], measured["grads"], measured["optimizer"], ...

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
"""
from __future__ import annotations

import torch

from labkit.measure.memory import unique_bytes

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
