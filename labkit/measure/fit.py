"""The peak of live tensor bytes on CPU (the twin of max_memory_allocated).

    with PeakBytes(model, optimizer) as peak:
        train_step(...)
    peak.bytes, peak.at          # the peak, and the operator it came after

A ``TorchDispatchMode`` keeps a weak reference to every storage an operator
creates, plus the model's parameters, gradients and optimizer states, and
after every operator that allocates (or runs a collective) sums the bytes of
those still alive, at their size then (FSDP resizes freed unsharded weights
to 0). The maximum is the peak
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

    def _track(self, t, origin="model state") -> bool:
        t = getattr(t, "_local_tensor", t)  # a DTensor's bytes are local
        s = t.untyped_storage()
        if s._cdata in self.refs:
            return False
        self.refs[s._cdata] = StorageWeakRef(s)
        self.origin[s._cdata] = origin
        return True

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
        new = False
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                new |= self._track(t, str(func.overloadpacket.__name__))
        if new or func.namespace in ("c10d", "_c10d_functional"):
            # the peak can only rise when memory is allocated (FSDP's
            # all-gather refills a resized buffer: a collective)
            self._sample(str(func.overloadpacket.__name__))
        return out


# -- where did the memory go: PyTorch's CUDA memory snapshot ---------------

class MemoryHistory:
    """Record the CUDA allocator's history; write PyTorch's snapshot file.

        with MemoryHistory(device, "snapshot.pickle") as h:
            train_step()
        h.path      # None on CPU: the twin is PeakBytes' composition

    On a GPU: ``torch.cuda.memory._record_memory_history`` on entry
    (``stacks="python"``: Python frames only -- the default ``"all"`` also
    unwinds and symbolises C++ frames at every allocation, slow with 8
    ranks, and :func:`read_snapshot` reads only the Python frames) and
    ``_dump_snapshot(path)`` on exit -- the file PyTorch's viewer
    (pytorch.org/memory_viz, or ``torch.cuda._memory_viz``) opens, and
    :func:`read_snapshot` summarises. On CPU nothing is recorded.
    """

    def __init__(self, device, path, max_entries: int = 100_000):
        self.cuda = getattr(device, "type", str(device)) == "cuda"
        self.want, self.max_entries, self.path = path, max_entries, None

    def __enter__(self):
        if self.cuda:  # CUDA only
            torch.cuda.memory._record_memory_history(
                stacks="python", max_entries=self.max_entries)
        return self

    def __exit__(self, *exc):
        if self.cuda:  # CUDA only
            torch.cuda.memory._dump_snapshot(str(self.want))
            torch.cuda.memory._record_memory_history(enabled=None)
            self.path = str(self.want)
        return False


def read_snapshot(snapshot: dict, top: int = 10) -> dict:
    """The live blocks of a snapshot (``_snapshot()`` or the pickled
    file's dict) grouped by the innermost frame in the course's or the
    model's code: ``{"allocated": bytes, "top": [(where, bytes), ...]}``.
    """
    by: dict = {}
    total = 0
    for seg in snapshot.get("segments", []):
        for blk in seg.get("blocks", []):
            if blk.get("state") != "active_allocated":
                continue
            total += blk["size"]
            where = _owner(blk.get("frames", []))
            by[where] = by.get(where, 0) + blk["size"]
    ranked = sorted(by.items(), key=lambda kv: -kv[1])
    return {"allocated": total, "top": ranked[:top]}


def _owner(frames) -> str:
    for f in frames:
        name = f.get("filename", "")
        if "labkit" in name or "/torch/nn/" in name or "/optim/" in name:
            return f"{name.rsplit('/', 1)[-1]}:{f.get('line')} {f.get('name')}"
    return "(no Python frame)" if not frames else frames[0].get("name", "?")
