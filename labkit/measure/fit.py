"""The peak of live tensor bytes on CPU (the twin of max_memory_allocated).

    with PeakBytes(model, optimizer) as peak:
        train_step(...)
    peak.bytes, peak.at          # the peak, and the operator it came after

A ``TorchDispatchMode`` keeps a weak reference to every storage an operator
creates, plus the model's parameters, gradients and optimizer states, and
after every operator sums the bytes of those still alive, at their size
then (FSDP resizes freed unsharded weights to 0). The maximum is the peak
of live tensor bytes: what the CUDA caching allocator's
``max_memory_allocated`` counts on a GPU, without its block rounding.
It costs a Python loop per operator: measure one or two steps.
"""
from __future__ import annotations

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode


class PeakBytes(TorchDispatchMode):
    def __init__(self, model=None, optimizer=None):
        super().__init__()
        self.refs: dict = {}
        self.origin: dict = {}     # storage -> the op that created it
        self.bytes = 0
        self.at = None
        self.composition: dict = {}  # {origin: bytes} at the peak
        tensors = list(model.parameters()) if model is not None else []
        tensors += [p.grad for p in tensors if p.grad is not None]
        if optimizer is not None:
            tensors += [v for st in optimizer.state.values()
                        for v in st.values() if isinstance(v, torch.Tensor)]
        for t in tensors:
            self._track(t)
        self._sample("start")

    def _track(self, t, origin="model state"):
        t = getattr(t, "_local_tensor", t)  # a DTensor's bytes are local
        s = t.untyped_storage()
        if s._cdata not in self.refs:
            self.refs[s._cdata] = StorageWeakRef(s)
            self.origin[s._cdata] = origin

    def _sample(self, where):
        live, dead, sizes = 0, [], {}
        for k, ref in self.refs.items():
            if ref.expired():
                dead.append(k)
            else:
                sizes[k] = torch.UntypedStorage._new_with_weak_ptr(
                    ref.cdata).nbytes()
                live += sizes[k]
        for k in dead:
            del self.refs[k], self.origin[k]
        if live > self.bytes:
            self.bytes, self.at = live, where
            comp: dict = {}
            for k, n in sizes.items():
                comp[self.origin[k]] = comp.get(self.origin[k], 0) + n
            self.composition = dict(sorted(comp.items(),
                                           key=lambda kv: -kv[1]))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                self._track(t, str(func.overloadpacket.__name__))
        self._sample(str(func.overloadpacket.__name__))
        return out
