"""Measure the model-state bytes a rank really holds (twin of predict.memory).

    measured = model_state_bytes(model, optimizer)   # inside a training rank
    measured["params"], measured["grads"], measured["optimizer"], ...

Bytes are counted per *storage*, not per tensor: a parameter that is a view
into a flat buffer (FSDP1's FlatParameter, DDP's bucket views, FSDP2's padded
shard) is charged the bytes its storage really has, once. A DTensor (FSDP2)
is charged its local shard. FSDP frees an unsharded parameter by resizing its
storage to 0 bytes, so a freed buffer counts 0 -- which is what lets
:func:`unsharded_param_bytes` see whether the full weights are alive.

Optimizer state: Adam's ``exp_avg`` and ``exp_avg_sq``; the per-tensor
``step`` counters (a few bytes each) are reported apart as
``optimizer_counters``, since no ledger counts them per parameter.
"""
from __future__ import annotations

from typing import Iterable

import torch


def _local(t: torch.Tensor) -> torch.Tensor:
    to_local = getattr(t, "to_local", None)  # DTensor
    return to_local() if callable(to_local) else t


def unique_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (None skipped)."""
    seen, total = set(), 0
    for t in tensors:
        if t is None:
            continue
        s = _local(t).untyped_storage()
        # the StorageImpl's address: one per storage, fake tensors too
        key = s._cdata if s.nbytes() else id(s)
        if key in seen:
            continue
        seen.add(key)
        total += s.nbytes()
    return total


def model_state_bytes(model: torch.nn.Module, optimizer=None) -> dict:
    """Parameters, gradients and optimizer state this rank holds, in bytes."""
    params = list(model.parameters())
    out = {"params": unique_bytes(params),
           "grads": unique_bytes(p.grad for p in params),
           "optimizer": 0, "optimizer_counters": 0}
    if optimizer is not None:
        states, counters = [], []
        for state in optimizer.state.values():
            for k, v in state.items():
                if isinstance(v, torch.Tensor):
                    (counters if k == "step" else states).append(v)
        out["optimizer"] = unique_bytes(states)
        out["optimizer_counters"] = unique_bytes(counters)
    out["total"] = out["params"] + out["grads"] + out["optimizer"]
    return out


def unsharded_param_bytes(model: torch.nn.Module) -> int:
    """Bytes of FSDP's gathered (unsharded) weights that are allocated now.

    FSDP2: each FSDPParam's all-gather output buffers; FSDP1: each
    FlatParameter's ``_full_param_padded``. Freed buffers have 0 bytes.
    0 for a model without FSDP.
    """
    return unique_bytes(unsharded_buffers(model))


def unsharded_buffers(model: torch.nn.Module) -> list[torch.Tensor]:
    """FSDP's buffers for the gathered weights (see above)."""
    tensors = []
    for m in model.modules():
        get_state = getattr(m, "_get_fsdp_state", None)  # FSDP2
        if callable(get_state):
            group = get_state()._fsdp_param_group
            for fp in (group.fsdp_params if group else []):
                tensors += list(getattr(fp, "all_gather_outputs", []))
        handle = getattr(m, "_handle", None)  # FSDP1
        flat = getattr(handle, "flat_param", None)
        if flat is not None and hasattr(flat, "_full_param_padded"):
            tensors.append(flat._full_param_padded)
    return tensors


def saved_activation_bytes(fn, *inputs) -> int:
    """Bytes autograd keeps for backward while ``fn(*inputs)`` runs.

    Every tensor saved for backward passes through
    ``torch.autograd.graph.saved_tensors_hooks``; each storage is charged
    once. This counts weights saved by the layers too (or their bf16 casts
    under autocast): :func:`activation_bytes` takes the difference of two
    batch sizes, in which they cancel.
    """
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*inputs)
    n = unique_bytes(saved)
    del out, saved
    return n


def activation_bytes(block: torch.nn.Module, batch: int, seq: int,
                     hidden: int, device, autocast=None,
                     recompute: bool = False) -> float:
    """Activation bytes of one layer for a micro-batch of ``batch``.

    Measured as ``batch x (saved(2 b) - saved(b)) / b``: the tensors saved
    for backward grow with the batch, the saved weights do not. With
    ``recompute`` the block runs under activation checkpointing
    (:func:`labkit.nn.model.recomputed`): only its input is kept.
    """
    import contextlib
    from labkit.nn.model import recomputed

    def run(b):
        x = torch.randn(b, seq, hidden, device=device, requires_grad=True)
        with autocast or contextlib.nullcontext():
            if recompute:
                return saved_activation_bytes(lambda t: recomputed(block, t),
                                              x)
            return saved_activation_bytes(block, x)
    return batch * (run(2 * batch) - run(batch)) / batch
