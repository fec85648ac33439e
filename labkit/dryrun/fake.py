"""A fake world: one process stands for one rank of an N-rank job.

    with fake_world(world_size=8, rank=3):
        ctx = rank_context(8, 3)
        model = wrap(build(config), "fsdp2_full", ctx)
        ...                      # every tensor is a FakeTensor

Three PyTorch pieces make it (torch >= 2.4):

- ``FakeTensorMode`` (``torch._subclasses.fake_tensor``): tensors carry
  shape, dtype, device and strides but no data; nothing is allocated;
- the fake process group (``torch.testing._internal.distributed.fake_pg``,
  backend ``"fake"``): every collective returns at once, so one process is
  rank ``rank`` of ``world_size`` with no peers;
- device meshes are built outside fake mode (their rank table is read with
  ``.tolist()``, which fake tensors refuse), cached per shape.

The fake tensors live on the CPU device: fake ``"cuda"`` tensors exist on
a CPU-only build, but many operators (``copy_`` among them) open a CUDA
device guard that such a build does not have ("PyTorch is not linked with
support for cuda devices"). Bytes do not depend on the device.

Three adjustments keep the course's own code unchanged: ``Module.to()`` on
a model with fake parameters replaces them instead of swapping them in
place (the fake mode holds weak references to its tensors, which
``swap_tensors`` refuses); DDP's start-up check that every rank has the
same shapes (it reads tensor data) is skipped -- every fake rank builds
the same model; DDP's all-reduce gets a hook that returns its bucket
(:func:`fake_ddp_hook`).
"""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as tdist
import torch.nn as nn

from labkit.dist import Context


def _apply_fake(original):
    from torch._subclasses.fake_tensor import FakeTensor

    def _apply(self, fn, recurse=True):
        if not any(isinstance(p, FakeTensor)
                   for p in self._parameters.values()):
            return original(self, fn, recurse)
        if recurse:
            for child in self.children():
                child._apply(fn)
        for key, p in self._parameters.items():
            if p is not None:
                with torch.no_grad():
                    q = fn(p)
                if q is not p:
                    self._parameters[key] = nn.Parameter(q, p.requires_grad)
        for key, b in self._buffers.items():
            if b is not None:
                self._buffers[key] = fn(b)
        return self
    return _apply


def _outside_fake(fn):
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    def call(*args, **kwargs):
        with unset_fake_temporarily():
            return fn(*args, **kwargs)
    return call


def _mesh_outside_fake(original, cache):
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    def init_device_mesh(device_type, mesh_shape, *, mesh_dim_names=None,
                         **kw):
        key = (tuple(mesh_shape), tuple(mesh_dim_names or ()))
        if key not in cache:
            with unset_fake_temporarily():
                cache[key] = original(device_type, tuple(mesh_shape),
                                      mesh_dim_names=mesh_dim_names, **kw)
        return cache[key]
    return init_device_mesh


@contextlib.contextmanager
def fake_world(world_size: int, rank: int = 0, backend: str = "fake"):
    """Rank ``rank`` of a fake ``world_size``-rank job, under fake tensors.

    ``backend`` may map more device types to the fake group (the
    rehearsal's ``"cpu:fake,meta:fake"``: ``meta`` stands for the rank's
    GPU there)."""
    import torch.distributed.device_mesh as dm
    import torch.distributed.fsdp._fully_shard._fsdp_init as fsdp_init
    import torch.distributed.tensor as dt
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if tdist.is_initialized():
        raise RuntimeError("fake_world needs no process group to exist")
    tdist.init_process_group(backend, store=FakeStore(), rank=rank,
                             world_size=world_size)
    mesh = _mesh_outside_fake(dm.init_device_mesh, {})
    import torch.nn.parallel.distributed as ddp
    saved = [(nn.Module, "_apply", nn.Module._apply),
             (ddp, "_verify_param_shape_across_processes",
              ddp._verify_param_shape_across_processes)]
    saved += [(mod, "init_device_mesh", mod.init_device_mesh)
              for mod in (dm, dt, fsdp_init)]
    # FSDP2 over a 2-D mesh concatenates its sub-meshes (a nonzero() on the
    # mesh tensor): that must see the real mesh, not a fake copy
    saved.append((dm.DeviceMesh, "_concatenate",
                  dm.DeviceMesh.__dict__["_concatenate"]))
    concatenate = dm.DeviceMesh._concatenate
    try:
        nn.Module._apply = _apply_fake(nn.Module._apply)
        # DDP compares shapes across ranks by reading tensor data; every
        # fake rank builds the same model, so there is nothing to compare
        ddp._verify_param_shape_across_processes = lambda *a, **k: None
        for mod in (dm, dt, fsdp_init):
            mod.init_device_mesh = mesh
        dm.DeviceMesh._concatenate = staticmethod(_outside_fake(concatenate))
        with FakeTensorMode(allow_non_fake_inputs=True):
            yield
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)
        tdist.destroy_process_group()


def rank_context(world_size: int, rank: int) -> Context:
    """The :class:`labkit.dist.Context` of rank ``rank`` in the fake world."""
    return Context(rank=rank, world_size=world_size, local_rank=rank % 8,
                   backend="fake", device=torch.device("cpu"))


def fake_ddp_hook(model) -> None:
    """DDP's all-reduce of a bucket, answered at once.

    The fake process group completes a collective without a result, and
    DDP's default hook hands that missing result back to its reducer; this
    hook all-reduces the bucket in place (through the fake group, as the
    default hook does) and returns the bucket itself.
    """
    def allreduce(state, bucket):
        buf = bucket.buffer()
        tdist.all_reduce(buf)
        fut = torch.futures.Future()
        fut.set_result(buf.div_(tdist.get_world_size()))
        return fut
    model.register_comm_hook(None, allreduce)
