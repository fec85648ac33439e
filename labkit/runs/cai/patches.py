"""Every run-time patch lab 9 applies to Colossal-AI 0.5.0, and nothing else.

    from labkit.runs.cai.patches import apply
    applied = apply("low_level_zero_2")   # names of the patches, [] if none

Colossal-AI picks its CPU accelerator and gloo on a machine without CUDA,
and ``TorchDDPPlugin`` trains as shipped. Other plugins stop on calls that
only a GPU accelerator implements. Each patch below replaces one such call
by what the CPU path needs, cites the Colossal-AI file and function it works
around, and is applied only on CPU and only for the plugins that need it;
the run records which patches it applied. None of them changes arithmetic:
the losses are compared with the single-process reference afterwards.
On a GPU, :func:`apply` does nothing.
"""
from __future__ import annotations

import torch

# plugin -> the patches it needs on CPU
NEEDS = {
    "torch_ddp": (),
    "low_level_zero_1": ("zero_sanity_check", "cpu_streams"),
    "low_level_zero_2": ("zero_sanity_check", "cpu_streams"),
    "torch_fsdp": ("fsdp_device_id",),
    "gemini": (),
    "hybrid_tp2": ("cpu_rng", "gpt2_set_device"),
    "hybrid_pp2": ("cpu_rng", "gpt2_set_device", "gloo_p2p_backend"),
}


def zero_sanity_check() -> None:
    """colossalai/zero/low_level/low_level_optim.py,
    ``LowLevelZeroOptimizer._sanity_checks``: asserts
    ``get_accelerator().name in ["cuda", "npu"]`` ("device is required")
    before its dtype checks. Keep the dtype checks, drop the device assert.
    """
    from colossalai.zero.low_level.low_level_optim import (
        LowLevelZeroOptimizer as Z)

    def _sanity_checks(self):
        for group in self.optim.param_groups:
            for p in group["params"]:
                if not getattr(p, "skip_zero_check", False):
                    assert p.dtype == self._dtype, (
                        f"Parameters are expected to have the same dtype "
                        f"`{self._dtype}`, but got `{p.dtype}`")

    Z._sanity_checks = _sanity_checks


def cpu_streams() -> None:
    """colossalai/zero/low_level/bookkeeping/bucket_store.py,
    ``BucketStore.__init__`` creates ``get_accelerator().Stream()``, and
    colossalai/zero/low_level/low_level_optim.py,
    ``LowLevelZeroOptimizer._run_reduction`` runs its reduction under
    ``get_accelerator().stream(get_accelerator().current_stream())``; the
    CPU accelerator refuses all three (colossalai/accelerator/
    cpu_accelerator.py, ``CpuAccelerator.Stream / current_stream /
    stream``). A CPU runs operations in order: the stream is None and
    entering it does nothing. (The side stream of
    ``overlap_communication=True`` would need ``record_stream``: lab 9
    turns overlap off on CPU.)
    """
    import contextlib

    from colossalai.accelerator.cpu_accelerator import CpuAccelerator
    CpuAccelerator.Stream = lambda self, device=None, priority=0, **kw: None
    CpuAccelerator.current_stream = lambda self, device=None: None
    CpuAccelerator.stream = lambda self, stream_: contextlib.nullcontext()


def fsdp_device_id() -> None:
    """colossalai/booster/plugin/torch_fsdp_plugin.py,
    ``TorchFSDPPlugin.configure``: wraps the model with
    ``device_id=torch.cuda.current_device()``, which needs a CUDA driver.
    On CPU, run ``configure`` with ``torch.cuda.current_device`` answering
    ``torch.device("cpu")``, which FSDP (torch 2.5) accepts with gloo.
    """
    from colossalai.booster.plugin import torch_fsdp_plugin as m
    configure = m.TorchFSDPPlugin.configure

    def patched(self, *args, **kwargs):
        saved = torch.cuda.current_device
        torch.cuda.current_device = lambda: torch.device("cpu")
        try:
            return configure(self, *args, **kwargs)
        finally:
            torch.cuda.current_device = saved

    m.TorchFSDPPlugin.configure = patched


def cpu_rng() -> None:
    """colossalai/shardformer/layer/utils.py, ``Randomizer.__init__``
    (built for every dropout shardformer replaces) calls
    ``get_accelerator().get_rng_state()`` and ``.manual_seed(seed)``; on
    CPU (colossalai/accelerator/cpu_accelerator.py) the first calls
    ``torch.get_rng_state(device)``, which torch 2.5 does not accept
    (TypeError), and the second raises "not supported". The CPU
    generator is the device's: read it and seed it. ``Randomizer`` sets the
    original state back at once, so the training's random stream (and its
    dropout, here p = 0) is unchanged.
    """
    from colossalai.accelerator.cpu_accelerator import CpuAccelerator
    CpuAccelerator.get_rng_state = lambda self, device=None: (
        torch.get_rng_state())
    CpuAccelerator.manual_seed = lambda self, seed: torch.manual_seed(seed)


def gpt2_set_device() -> None:
    """colossalai/shardformer/modeling/gpt2.py,
    ``GPT2PipelineForwards.gpt2_model_forward``: calls
    ``torch.cuda.set_device(hidden_states.device)`` before every block,
    which raises "Expected a cuda device" for a CPU tensor. On a machine
    without CUDA, ``torch.cuda.set_device`` of a CPU device does nothing
    (there is no current CUDA device to choose); any other device still
    reaches torch.
    """
    set_device = torch.cuda.set_device

    def patched(device):
        if torch.device(device).type == "cpu":
            return None
        return set_device(device)

    torch.cuda.set_device = patched


def gloo_p2p_backend() -> None:
    """colossalai/pipeline/p2p.py, ``_check_for_nccl_hccl_backend``:
    compares the group's backend with ``c10d.Backend.NCCL`` and then
    ``c10d.Backend.HCCL``, a name torch 2.5 does not define; with NCCL the
    first test is true and the second never runs, with gloo it raises
    AttributeError. Define the name (Ascend's backend string, "hccl"), so
    that gloo is answered "not NCCL/HCCL" and P2P uses CPU tensors.
    """
    from torch.distributed import distributed_c10d as c10d
    if not hasattr(c10d.Backend, "HCCL"):
        c10d.Backend.HCCL = "hccl"


PATCHES = {f.__name__: f for f in (zero_sanity_check, cpu_streams,
                                   fsdp_device_id, cpu_rng, gpt2_set_device,
                                   gloo_p2p_backend)}
_applied: set = set()


def apply(plugin: str) -> list[str]:
    """Apply the patches ``plugin`` needs on this machine; return names."""
    if plugin not in NEEDS:
        raise ValueError(f"unknown plugin {plugin!r}: {', '.join(NEEDS)}")
    if torch.cuda.is_available():
        return []
    for name in NEEDS[plugin]:
        if name not in _applied:
            PATCHES[name]()
            _applied.add(name)
    return list(NEEDS[plugin])
