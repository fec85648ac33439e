"""What a rehearsed rank's own process would give it, in this one.

    with fake_world(...), own_process(rules, real_mesh):   # world.py
        ...                    # the run module's main()

On the node each rank is a fresh process; here every rank of every launch
runs in the notebook's kernel, one after the other. So:

- every process group a rank makes (``new_group``, a mesh's, Megatron's
  gloo groups beside its nccl ones) is the fake group's, since a real
  gloo group wants a real store; one asked for as gloo may carry CPU
  tensors, as on the node (``rules.cpu_groups``);
- a course module that bound ``init_device_mesh`` at import (``from
  torch.distributed.device_mesh import init_device_mesh``) gets the fake
  world's, as one calling it through its module does;
- Megatron's parallel state ends with the rank, as the process would
  (a tp=2 rank's sizes would split the next launch's tp=4 layers by 2);
- so do DTensor's caches (sharding propagation, redistribution plans):
  they key on a device mesh, and a mesh equals another rank's of the
  same shape, whose groups have other names (a rank makes every group of
  a 2-D mesh but registers only its own): rank 7 of lab 10 redistributed
  over rank 0's "tp" group ("Could not resolve the process group");
- a device mesh's rank table (``mesh["tp"].mesh``) is real, as on the
  node, where it is a CPU tensor of rank ids, never data: it is computed
  outside fake mode and is a :class:`RankTable`, whose own operators run
  outside fake mode too (``.flatten().tolist()``: lab 10 names each
  collective's mesh dimension by those ranks). Only the table and what
  is computed from it alone stay real; mixed with a fake tensor it is
  fake like any other input, and no other tensor changes (FakeTensorMode's
  constant rule is left as it is).
"""
from __future__ import annotations

import contextlib
import sys

import torch
import torch.distributed as tdist

FAKE = "cpu:fake,meta:fake"     # the fake group serves both devices


def _rebind(real, stand_in) -> list:
    """Every course module's global bound to ``real``, now ``stand_in``;
    the (module, name, real) to restore."""
    out = []
    for name, mod in list(sys.modules.items()):
        if not name.startswith("labkit.") or mod is None:
            continue
        for attr, value in list(vars(mod).items()):
            if value is real:
                out.append((mod, attr, real))
                setattr(mod, attr, stand_in)
    return out


class RankTable(torch.Tensor):
    """A device mesh's rank table, real under fake mode (see the module
    doc): an operator whose tensors are rank tables or real tensors runs
    outside fake mode, and its tensor results are rank tables."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        from torch._subclasses.fake_tensor import (FakeTensor,
                                                   unset_fake_temporarily)
        from torch.utils._pytree import tree_flatten, tree_map_only
        kwargs = kwargs or {}
        fake = any(isinstance(t, FakeTensor) for t in
                   tree_flatten((args, kwargs))[0])
        with torch._C.DisableTorchFunctionSubclass():
            if fake:     # mixed with fake data: an input like any other
                args, kwargs = tree_map_only(cls, lambda t: t.as_subclass(
                    torch.Tensor), (args, kwargs))
                return func(*args, **kwargs)
            with unset_fake_temporarily():
                out = func(*args, **kwargs)
        return tree_map_only(torch.Tensor, lambda t: t if isinstance(
            t, (cls, FakeTensor)) else t.as_subclass(cls), out)


def _real_rank_tables() -> list:
    """``DeviceMesh.mesh`` computed outside fake mode, a :class:`RankTable`
    (its ``nonzero()`` on the rank ids needs their values)."""
    import torch.distributed.device_mesh as dm
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    prop = dm.DeviceMesh.__dict__["mesh"]

    def mesh(self):
        with unset_fake_temporarily():
            return prop.fget(self).as_subclass(RankTable)
    dm.DeviceMesh.mesh = property(mesh, doc=prop.__doc__)
    return [(dm.DeviceMesh, "mesh", prop)]


def _forget_library_state() -> None:
    ps = sys.modules.get("megatron.core.parallel_state")
    if ps is not None:
        ps.destroy_model_parallel()
    _forget_dtensor_caches()


def _forget_dtensor_caches() -> None:
    """DTensor's caches that hold a device mesh (see the module doc)."""
    if "torch.distributed.tensor" not in sys.modules:
        return
    from torch.distributed.tensor import _collective_utils as cu
    from torch.distributed.tensor import _redistribute as rd
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache
    _clear_sharding_prop_cache()
    rd._gen_transform_infos.cache_clear()
    rd.clear_redistribute_planner_cache()
    cu.MeshTopoInfo.build_from_mesh.cache_clear()


@contextlib.contextmanager
def own_process(rules, real_mesh):
    """Inside the fake world: ``rules`` (the rank's NcclRules) learns
    the gloo groups; ``real_mesh``: ``init_device_mesh`` as it was before
    the fake world replaced it."""
    import torch.distributed.device_mesh as dm
    import torch.distributed.distributed_c10d as c10d
    new_pg = c10d._new_process_group_helper

    def fake_subgroup(size, group_rank, ranks, backend, *a, **k):
        pg, store = new_pg(size, group_rank, ranks, c10d.Backend(FAKE),
                           *a, **k)
        if str(backend or "").lower() == "gloo" and \
                isinstance(pg, tdist.ProcessGroup):   # not a non-member
            rules.cpu_groups.add(pg.group_name)
        return pg, store
    saved = [(c10d, "_new_process_group_helper", new_pg)]
    try:
        saved += _rebind(real_mesh, dm.init_device_mesh)
        saved += _real_rank_tables()
        c10d._new_process_group_helper = fake_subgroup
        _forget_dtensor_caches()    # a fresh process has none
        yield
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)
        _forget_library_state()
