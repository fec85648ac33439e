"""FSDP1 on a rank whose GPU is ``meta``: its moves and its streams.

    with fsdp1_on_meta(torch.device("meta")):   # inside rehearsed_rank
        FSDP(model, device_id=ctx.device, ...)  # the run module, unchanged

FSDP1 given ``device_id`` moves each unit's CPU parameters and buffers
to the GPU as it wraps the unit (``_move_module_to_device``), one unit at
a time, with ``param.data = param.to(device)``. A fake CPU tensor refuses
a fake ``meta`` one as its ``.data`` (another tensor type), so the stand-in
makes the same move the way ``nn.Module.to`` does for such a pair: the
module's parameter replaced by one on the device (tied parameters stay
tied). Which states move, and when, is FSDP's own: the same walk, not
past a nested FSDP instance, only states on the CPU.
"""
from __future__ import annotations

import collections
import contextlib

import torch
from torch import nn


def _move_module_to_device(module, ignored_params, ignored_buffers,
                           device):
    """``torch.distributed.fsdp._init_utils._move_module_to_device`` for
    the ``meta`` GPU (see the module doc)."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    cpu, moved = torch.device("cpu"), {}
    queue = collections.deque([module])
    while queue:
        m = queue.popleft()
        with torch.no_grad():
            for name, p in m._parameters.items():
                if p is None or p.device != cpu or p in ignored_params:
                    continue
                if p not in moved:
                    moved[p] = nn.Parameter(p.to(device),
                                            requires_grad=p.requires_grad)
                m._parameters[name] = moved[p]
            for name, b in m._buffers.items():
                if b is not None and b.device == cpu and \
                        b not in ignored_buffers:
                    m._buffers[name] = b.to(device)
        queue.extend(c for c in m.children() if not isinstance(c, FSDP))


@contextlib.contextmanager
def fsdp1_on_meta(device: torch.device):
    """FSDP1's move to ``device`` (``meta``) as the stand-in makes it."""
    import torch.distributed.fsdp._init_utils as iu
    real = iu._move_module_to_device

    def move(module, ignored_params, ignored_buffers, to):
        if to is not None and to.type == device.type:
            return _move_module_to_device(module, ignored_params,
                                          ignored_buffers, to)
        return real(module, ignored_params, ignored_buffers, to)
    iu._move_module_to_device = move
    try:
        yield
    finally:
        iu._move_module_to_device = real
