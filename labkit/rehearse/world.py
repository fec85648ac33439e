"""One rank of a launch, rehearsed in this process on fake tensors.

    with rehearsed_rank(world_size=2, rank=1) as r:
        runpy-like: r.main(module, argv)    # the run module's own main()
    r.record        # what dist.save was given ("not rehearsed" values NaN)
    r.rules         # the NCCL stand-in (labkit.rehearse.nccl)
    r.peak          # the most bytes alive on the rank at once
    r.host_peak     # of which on the host (CPU), the model's build included

The rank is :func:`labkit.dryrun.fake.fake_world` with one change: the
fake process group also serves the ``meta`` device, and ``meta`` stands
for the rank's GPU -- ``dist.init()`` returns a context whose device is
``meta`` and whose backend is ``nccl``. Fake tensors on ``meta`` carry
shapes, dtypes and their device, and FakeTensorMode refuses an operator
on tensors of two devices, as CUDA does ("Expected all tensors to be on
the same device"); a tensor left on the CPU is therefore seen, by the
operator that mixes it in or by the collective that carries it
(:class:`labkit.rehearse.nccl.NcclRules`).

Values fake tensors cannot produce -- ``.item()`` of a loss, a difference,
a norm -- come back as NaN and are counted (``r.not_rehearsed``); the
report shows them as "not rehearsed", never as numbers. ``dist.save``
keeps the record here; ``dist.close`` and ``dist.sync`` do nothing.
``torch.autocast("meta")`` is CUDA's autocast, stood in for
(:mod:`labkit.rehearse.autocast`), and attention on ``meta`` runs the
fused kernel CUDA would pick (:mod:`labkit.rehearse.attention`).

What the rank's own process would give it -- its own groups, module
globals and library state -- is :mod:`labkit.rehearse.process`.
"""
from __future__ import annotations

import contextlib
import math

import torch

from labkit import dist
from labkit.dryrun.account import Tracker
from labkit.dryrun.fake import fake_world
from labkit.rehearse.attention import cuda_attention
from labkit.rehearse.autocast import patched_autocast
from labkit.rehearse.fsdp import fsdp1_on_meta
from labkit.rehearse.env import DEEPSPEED_ON_CPU
from labkit.rehearse.nccl import (NcclRules, object_collectives,
                                  watch_groups)
from labkit.rehearse.process import FAKE, own_process

DEVICE = torch.device("meta")   # the rank's GPU, in a rehearsal


class Rank:
    def __init__(self, world_size: int, rank: int):
        self.world_size, self.rank = world_size, rank
        self.rules = NcclRules(rank, DEVICE)
        self.record: dict | None = None
        self.not_rehearsed = 0
        self.peak = 0
        self.host_peak = 0    # bytes on the host (CPU) at once
        self.error: str | None = None

    def context(self) -> dist.Context:
        return dist.Context(rank=self.rank, world_size=self.world_size,
                            local_rank=self.rank % 8, backend="nccl",
                            device=DEVICE)

    def main(self, fn, argv) -> None:
        """Run ``fn(argv)`` (a run module's ``main``) as this rank;
        an exception is kept as this rank's one-line error."""
        import inspect
        import io
        import sys
        tracker, err = Tracker(), io.StringIO()
        argv0 = sys.argv
        try:
            sys.argv = [getattr(fn, "__module__", "rank"), *argv]
            with tracker, self.rules, watch_groups(self.rules), \
                    object_collectives(self.rules), \
                    contextlib.redirect_stderr(err):
                # main(argv), or main() reading sys.argv, as under torchrun
                fn(argv) if inspect.signature(fn).parameters else fn()
        except SystemExit as e:   # argparse's p.error(): the rank exits 2
            if isinstance(e.code, str):        # sys.exit("why")
                self.error = f"exit status 1: {e.code.splitlines()[0]}"
            elif e.code not in (0, None):
                said = [x for x in err.getvalue().splitlines() if x.strip()]
                self.error = f"exit status {e.code}" + (
                    f": {said[-1]}" if said else "")
        except Exception as e:  # noqa: BLE001 - the rank's failure
            import traceback
            self.error = f"{type(e).__name__}: {str(e).splitlines()[0]}" \
                if str(e) else type(e).__name__
            ours = [f for f in traceback.extract_tb(e.__traceback__)
                    if "/labkit/" in f.filename and "/rehearse/"
                    not in f.filename and "dryrun/account.py"
                    not in f.filename]
            if ours:   # where in the course's code the rank stopped
                f = ours[-1]
                self.error += (f" (at {f.filename.split('/labkit/')[-1]}"
                               f":{f.lineno})")
            self.error += _deepspeed_here(e)
        finally:
            sys.argv = argv0
        self.peak = tracker.peak
        self.host_peak = tracker.host_peak
        self.not_rehearsed += self.rules.not_rehearsed




def _deepspeed_here(e: BaseException) -> str:
    """A note when DeepSpeed's own code raised ``e`` while its accelerator
    is this machine's CPU: DeepSpeed makes its buffers and gradients on
    ``get_accelerator()`` (chosen at import: CUDA on the node), never on
    the rank's GPU, which is ``meta`` here -- an error of the stand-in,
    not of the rank's code."""
    import sys
    import traceback
    frames = traceback.extract_tb(e.__traceback__)
    last = max((i for i, f in enumerate(frames) if "/labkit/" in f.filename
                and "/rehearse/" not in f.filename), default=-1)
    if not any("/deepspeed/" in f.filename for f in frames[last + 1:]):
        return ""
    acc = sys.modules.get("deepspeed.accelerator")
    try:
        name = acc.get_accelerator().device_name() if acc else None
    except Exception:  # noqa: BLE001 - no accelerator to ask
        name = None
    return f" [{DEEPSPEED_ON_CPU}]" if name == "cpu" else ""


def meta_device_module():
    """``torch.meta``: the device module of ``meta``, the rank's GPU
    (FSDP asks ``torch.<device type>`` for streams, events and the
    current device). The CPU's, whose streams do nothing, except that the
    current device is ``meta``, as ``torch.cuda.current_device()`` is the
    rank's GPU: FSDP1 given ``device_id=meta`` (no index) takes the
    current device, and the CPU's would keep its flat parameters on the
    CPU. And a stream records an event, as a CUDA stream does: the CPU's
    ``record_event`` returns None, and FSDP2's HSDP asserts its
    all-reduce's event on any device that is not the CPU."""
    import types

    class Stream(torch.cpu.Stream):
        def record_event(self, event=None):
            event = event or torch.cpu.Event()
            event.record(self)
            return event
    default = Stream()

    def current_stream(device=None):
        s = torch.cpu.current_stream()
        return s if isinstance(s, Stream) else default
    mod = types.ModuleType("torch.meta")
    mod.__dict__.update({k: v for k, v in vars(torch.cpu).items()
                         if not k.startswith("__")})
    mod.current_device = lambda: "meta"
    mod.Stream, mod.current_stream = Stream, current_stream
    mod.default_stream = lambda device=None: default
    return mod


class _NoRebuild:
    """DDP's reducer, less the bucket rebuild of its second forward: it
    broadcasts the new bucket order in a tensor and reads it back, data a
    ``meta`` tensor does not have. The buckets keep their first order
    (the same bytes: the rebuild only reorders them)."""

    def __init__(self, reducer):
        self._reducer = reducer

    def _rebuild_buckets(self):
        return False

    def __getattr__(self, name):
        return getattr(self._reducer, name)


@contextlib.contextmanager
def rehearsed_rank(world_size: int, rank: int, run_dir=None):
    """Rank ``rank`` of ``world_size``, fake, its GPU the ``meta`` device."""
    from torch._subclasses.fake_tensor import FakeTensor
    r = Rank(world_size, rank)
    item = torch.Tensor.item

    def fake_item(self):
        if isinstance(self, FakeTensor) and self.constant is None:
            r.not_rehearsed += 1
            return math.nan
        return item(self)

    def save(ctx, record):
        r.record = {"rank": ctx.rank, "world_size": ctx.world_size,
                    "backend": ctx.backend, **record}
    saved = [(dist, n, getattr(dist, n)) for n in ("init", "save", "close",
                                                   "sync")]
    import os
    # what torchrun gives every rank in its environment
    env = {"RANK": rank, "WORLD_SIZE": world_size, "LOCAL_RANK": rank % 8,
           "LOCAL_WORLD_SIZE": min(world_size, 8), "GROUP_RANK": rank // 8}
    if run_dir is not None:   # the launch's folder, as labkit.launch sets it
        env["LABKIT_RUN_DIR"] = run_dir
    saved_env = {k: os.environ.get(k) for k in env}
    saved.append((torch.Tensor, "item", item))
    saved.append((torch.accelerator, "current_stream",
                  torch.accelerator.current_stream))
    import torch.distributed.fsdp._fully_shard._fully_shard as fsdp2
    saved += [(fsdp2, n, getattr(fsdp2, n)) for n in
              ("_init_default_mesh", "_get_device_from_mesh")]
    device_from_mesh = fsdp2._get_device_from_mesh

    def default_mesh(mesh_dim_names=None):
        """FSDP2's default mesh is the accelerator's: the GPU's, here
        ``meta`` (a CPU build would give a CPU mesh, and FSDP2 would put
        the shards and the inputs on the CPU)."""
        import torch.distributed.fsdp._fully_shard._fsdp_init as init
        return init.init_device_mesh("meta", (world_size,),
                                     mesh_dim_names=mesh_dim_names)
    import functools
    import torch.distributed.fsdp as tfsdp
    real_shard = tfsdp.fully_shard
    saved.append((tfsdp, "fully_shard", real_shard))

    @functools.wraps(real_shard)
    def fully_shard(module, *a, **k):
        """FSDP2 moves a unit's states to the mesh's device as it shards
        it, with ``tensor.data = ...``, which a CPU fake tensor refuses
        for a ``meta`` one: the unit goes there first (the same move)."""
        mesh = k.get("mesh")
        if mesh is None or mesh.device_type == "meta":
            for m in (module if isinstance(module, list) else [module]):
                m.to(DEVICE)
        return real_shard(module, *a, **k)
    import torch.distributed.fsdp._fully_shard._fsdp_param_group as fpg
    saved.append((fpg.FSDPParamGroup, "_validate_no_meta_params",
                  fpg.FSDPParamGroup._validate_no_meta_params))
    import torch.nn.parallel as par
    ddp_init = par.DistributedDataParallel.__init__
    saved.append((par.DistributedDataParallel, "__init__", ddp_init))

    def ddp_with_fake_hook(self, *a, **k):
        """DDP's all-reduce answered by the fake group (its own hook
        returns nothing there): the dry run's hook, registered at once."""
        from labkit.dryrun.fake import fake_ddp_hook
        ddp_init(self, *a, **k)
        fake_ddp_hook(self)
        self.reducer = _NoRebuild(self.reducer)
    import torch.distributed.device_mesh as dm
    real_mesh = dm.init_device_mesh
    with fake_world(world_size, rank, backend=FAKE), patched_autocast(), \
            own_process(r.rules, real_mesh), fsdp1_on_meta(DEVICE), \
            cuda_attention():
        try:
            dist.init = lambda *a, **k: r.context()
            dist.save = save
            dist.close = lambda: None
            dist.sync = lambda ctx: None
            torch.Tensor.item = fake_item
            os.environ.update({k: str(v) for k, v in env.items()})
            torch.meta = meta_device_module()
            # FSDP2 waits on the accelerator's stream where it would on
            # CUDA's (finalize_backward's unshard left without a wait):
            # the accelerator of the node is the rank's GPU, meta here
            torch.accelerator.current_stream = \
                lambda device=None: torch.meta.current_stream()
            par.DistributedDataParallel.__init__ = ddp_with_fake_hook
            fsdp2._init_default_mesh = default_mesh
            tfsdp.fully_shard = fully_shard
            # meta *is* the GPU here, not deferred initialisation
            fpg.FSDPParamGroup._validate_no_meta_params = lambda self: None
            fsdp2._get_device_from_mesh = lambda mesh: (
                DEVICE if mesh.device_type == "meta"
                else device_from_mesh(mesh))
            yield r
        finally:
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            del torch.meta
            for obj, name, value in saved:
                setattr(obj, name, value)
