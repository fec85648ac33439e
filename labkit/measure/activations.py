"""Measure what a forward pass keeps for backward (twin of predict.activations).

    got = measure(model, x, y)                 # fp32
    got = measure(model, x, y, autocast=torch.autocast("cpu", torch.bfloat16))
    got["total"], got["tensors"]               # bytes, [(dtype, bytes, op)]

Why not saved-tensor hooks alone: ``torch.utils.checkpoint`` installs its
own ``saved_tensors_hooks`` inside a checkpointed block, so an outer hook
sees nothing there. What costs memory is what *stays allocated*: every
storage an operator creates during the forward that is still alive when
the forward returns (the loss aside) is kept for backward -- saved by
autograd, cached by a selective-checkpoint policy, or held by a checkpoint
as its input. A ``TorchDispatchMode`` records a weak reference to each
new storage; after the forward the live ones are counted, once per storage,
at their size then (FSDP resizes a freed unsharded weight to 0 bytes, so it
counts 0). Parameters are not counted (they exist before the forward);
autocast's bf16 copies of them are, and are labelled ``weight_cast``.
Without recomputation, :func:`hooked_bytes` (the saved-tensor hooks, also
deduplicated by storage, parameters aside) gives the same total. Fake
tensors count as well (their storages have sizes, not data): a rehearsal
measures a real-size model on its stand-in GPU
(:mod:`labkit.rehearse.kernel`).

One race: a buffer handed to a collective (FSDP2's flat all-gather output)
is freed by FSDP as soon as the collective is waited on, but gloo's worker
thread drops its own reference a moment later. At the instant the forward
returns, that buffer can still be alive (CI saw it: +66,048 bytes, the
head's all-gather buffer, on one rank in one run of several). So the
storages that went through a ``c10d`` op are given up to ``settle_s`` to
be released; one still alive then is really kept and counted. The
functional collectives (``_c10d_functional``: the EP all-to-all of
:mod:`labkit.nn.moe.expert_parallel`) allocate their output themselves, so
their outputs count as communicated too (before this, a landing CI run
counted one 7,168-byte fp32 storage more than the EP ledger on one rank:
an all-to-all's output, most likely, that gloo had not yet let go of).
"""
from __future__ import annotations

import contextlib
import gc
import time

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode

DTYPE = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.int64: "int64",
         torch.float16: "fp16", torch.bool: "bool"}


class _NewStorages(TorchDispatchMode):
    def __init__(self, exclude: set):
        super().__init__()
        self.exclude = exclude
        self.seen: dict = {}
        self.communicated: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if "c10d" in func.namespace:     # c10d, _c10d_functional(_autograd)
            self.communicated |= {_key(t) for t in _tensors((args, out))}
        cast = (func is torch.ops.aten._to_copy.default and args
                and isinstance(args[0], torch.Tensor)
                and _key(args[0]) in self.exclude)
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor):  # meta: a rehearsal's GPU
                k = _key(t)
                if k not in self.exclude and k not in self.seen:
                    self.seen[k] = (StorageWeakRef(t.untyped_storage()),
                                    DTYPE.get(t.dtype, str(t.dtype)),
                                    "weight_cast" if cast else "activation",
                                    str(func.overloadpacket.__name__))
        return out


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _tensors(args):
    for a in args:
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from _tensors(a)


def _settle(mode: _NewStorages, skip: int, settle_s: float) -> None:
    """Give the backend up to ``settle_s`` to drop its references to the
    forward's communication buffers; return as soon as none is alive."""
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline:
        alive = [k for k in mode.communicated if k in mode.seen
                 and k != skip and not mode.seen[k][0].expired()]
        if not alive:
            return
        time.sleep(0.002)
        gc.collect()


def measure(model, x, y, autocast=None, settle_s: float = 1.0) -> dict:
    """Bytes the forward ``model(x, y)`` leaves alive for its backward.

    Returns ``{"total", "activation", "weight_cast", "tensors": [(dtype,
    bytes, kind, op), ...], "loss"}``; keep ``loss`` to run the backward.
    """
    params = {_key(p) for p in model.parameters()}
    params |= {_key(t) for t in (x, y)}
    mode = _NewStorages(params)
    with (autocast or contextlib.nullcontext()), mode:
        loss = model(x, y)
    gc.collect()
    skip = _key(loss)
    _settle(mode, skip, settle_s)
    tensors = []
    for k, (ref, dtype, kind, op) in mode.seen.items():
        if k == skip or ref.expired():
            continue
        n = torch.UntypedStorage._new_with_weak_ptr(ref.cdata).nbytes()
        if n:
            tensors.append((dtype, n, kind, op))
    out = {"tensors": sorted(tensors), "loss": loss,
           "total": sum(t[1] for t in tensors)}
    for kind in ("activation", "weight_cast"):
        out[kind] = sum(t[1] for t in tensors if t[2] == kind)
    return out


def hooked_bytes(model, x, y, autocast=None) -> int:
    """The saved-tensor hooks' count (storage by storage, parameters and
    inputs aside): equal to :func:`measure` without recomputation, blind
    inside a checkpoint."""
    exclude = {_key(p) for p in model.parameters()} | {_key(x), _key(y)}
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(
            lambda t: kept.append(t) or t, lambda t: t), \
            (autocast or contextlib.nullcontext()):
        loss = model(x, y)
    seen, n = set(), 0
    for t in kept:
        k = _key(t)
        if k in exclude or k in seen or k == _key(loss):
            continue
        seen.add(k)
        n += t.untyped_storage().nbytes()
    return n


def as_multiset(entries) -> list:
    """Ledger entries (predict.activations.Saved) as sorted (dtype, bytes)."""
    return sorted((e.dtype, e.bytes) for e in entries)
