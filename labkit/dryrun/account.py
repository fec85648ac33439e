"""Per-rank memory of one training step, counted storage by storage.

    tracker = Tracker()
    with tracker:
        model, optimizer, step = setup()
        tracker.begin(model, optimizer)
        step()                      # forward, backward, optimizer step
    tracker.report()                # bytes per category and the peak

Works the same on real tensors (the validation run of
``tests/test_dryrun.py``) and on fake ones (the dry run): nothing here
reads tensor data, only storages and their sizes.

- ``params``, ``grads``, ``optimizer``: what the rank holds after the step
  (:func:`labkit.measure.memory.model_state_bytes`, per storage, DTensor
  shards as their local part);
- ``activations``: the tensors autograd saved for backward by the end of
  the forward pass (``saved_tensors_hooks``), weights left out;
- ``gathered``: the most bytes of weight copies alive at once -- FSDP's
  all-gathered parameters and autocast's 16-bit casts of the weights;
- ``peak``: the most bytes alive at once during the step. Every storage an
  operator creates is counted from its creation until it is freed (a weak
  reference's callback), every storage resized (FSDP frees and re-allocates
  its gathered buffers with ``UntypedStorage.resize_``) by its new size;
  what was alive before the step (model states) starts the count.
- ``host_peak``: the most bytes alive at once on the CPU device over
  the whole span, the model's build included (not reset by ``begin``):
  where a rank's GPU is another device (the rehearsal's ``meta``), the
  host RAM the rank takes;
- ``other``: peak minus the categories above (logits and their fp32 copy,
  DDP's gradient buckets, temporaries, gradients of a partly done
  backward); categories have their own maxima, so this is a remainder.

Why not ``torch.distributed._tools.FSDPMemTracker``: tried on the gpu8
sizes it counted FSDP2 shards as SGD momentum and a fraction of the
activations (issue 17); this counter is held to a real CPU run in the tests.
"""
from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from labkit.measure.memory import (model_state_bytes, unique_bytes,
                                   unsharded_buffers, unsharded_param_bytes)

CATEGORIES = ("params", "grads", "optimizer", "activations", "gathered",
              "other", "peak")


def _local(t):
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def _key(storage) -> int:
    return storage._cdata


class Tracker(TorchDispatchMode):
    """Live bytes of every storage during a step; see the module doc."""

    def __init__(self):
        super().__init__()
        self.model = self.optimizer = None
        self.live: dict[int, int] = {}
        self.weights: set[int] = set()   # keys of weight storages
        self.copies: dict[int, int] = {}  # live weight copies, bytes
        self.now = self.peak = self.gathered = self.copied = 0
        self.host: dict[int, int] = {}   # live storages on the CPU
        self.host_now = self.host_peak = 0
        self.saved: list = []
        self._resize = None

    def begin(self, model, optimizer=None):
        """The step starts: what is alive now (the model as built and
        wrapped, its optimizer state, DDP's buckets) starts the count."""
        self.model, self.optimizer = model, optimizer
        self.weights = {_key(s) for s in self._param_storages()}
        self.peak = self.now
        self.gathered = self.copied

    # -- bookkeeping ---------------------------------------------------
    def _add(self, storage, tag_copy=False, device=None):
        """``device``: the tensor's (a fake tensor's storage is on meta
        whatever device the tensor stands on)."""
        k = _key(storage)
        n = storage.nbytes()
        if k in self.live:
            self._set(k, n)
            return
        self.live[k] = n
        self.now += n
        if device is not None and device.type == "cpu":
            self.host[k] = n
            self.host_now += n
            self.host_peak = max(self.host_peak, self.host_now)
        if tag_copy:
            self.copies[k] = n
            self.copied += n
        weakref.finalize(storage, self._free, k)
        self._bump()

    def _set(self, k, n):
        self.now += n - self.live[k]
        self.live[k] = n
        if k in self.host:
            self.host_now += n - self.host[k]
            self.host[k] = n
            self.host_peak = max(self.host_peak, self.host_now)
        if k in self.copies:
            self.copied += n - self.copies[k]
            self.copies[k] = n
        self._bump()

    def _free(self, k):
        n = self.live.pop(k, 0)
        self.now -= n
        self.host_now -= self.host.pop(k, 0)
        self.copied -= self.copies.pop(k, 0)

    def _bump(self):
        self.peak = max(self.peak, self.now)
        self.gathered = max(self.gathered, self.copied)

    def _param_storages(self):
        return [_local(p).untyped_storage() for p in self.model.parameters()]

    # -- the dispatch hook ----------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # a DTensor reaches this mode before its own dispatch (modes come
        # first): its bytes are those of its local tensor
        copy = (func is torch.ops.aten._to_copy.default
                and isinstance(args[0], torch.Tensor)
                and _key(_local(args[0]).untyped_storage()) in self.weights)
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                local = _local(t)
                self._add(local.untyped_storage(), copy, local.device)
        return out

    def __enter__(self):
        tracker = self
        original = torch.UntypedStorage.resize_

        def resize_(storage, n):  # FSDP's free and re-allocation
            out = original(storage, n)
            k = _key(storage)
            if k in tracker.live:
                tracker._set(k, storage.nbytes())
            else:
                tracker._add(storage)
            if k not in tracker.copies:  # FSDP's gathered weights
                tracker.copies[k] = storage.nbytes()
                tracker.copied += storage.nbytes()
            tracker._bump()
            return out
        self._resize = original
        torch.UntypedStorage.resize_ = resize_
        return super().__enter__()

    def __exit__(self, *exc):
        torch.UntypedStorage.resize_ = self._resize
        return super().__exit__(*exc)

    # -- activations ------------------------------------------------------
    def forward(self, fn, *args):
        """``fn(*args)`` with the tensors it saves for backward recorded."""
        def pack(t):
            self.saved.append(t)
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = fn(*args)
        weights = (self.weights | set(self.copies)
                   | {_key(t.untyped_storage())
                      for t in unsharded_buffers(self.model)})
        self.activations = unique_bytes(
            t for t in self.saved
            if _key(_local(t).untyped_storage()) not in weights)
        self.gathered = max(self.gathered, unsharded_param_bytes(self.model))
        self.saved = []
        return out

    def report(self) -> dict:
        states = model_state_bytes(self.model, self.optimizer)
        out = {k: states[k] for k in ("params", "grads", "optimizer")}
        out["activations"] = getattr(self, "activations", 0)
        out["gathered"] = self.gathered
        out["peak"] = self.peak
        out["other"] = max(0, self.peak - sum(
            out[k] for k in ("params", "grads", "optimizer", "activations",
                             "gathered")))
        return {k: int(out[k]) for k in CATEGORIES}
