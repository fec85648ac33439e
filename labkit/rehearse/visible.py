"""A node's GPUs as its CUDA runtime shows them, to ranks on this CPU.

    LABKIT_REHEARSE_GPUS=1   # in a launched rank's env (labkit.launch.rank)

A rank started with this sees what a rank on a node with that many GPUs
would see: ``torch.cuda.is_available()`` true, ``device_count()`` N and
the accelerator ``cuda`` -- unless its ``CUDA_VISIBLE_DEVICES`` is empty,
when it sees none, as on the node. ``torch.cuda.set_device(i)`` answers
for ``i >= N`` with CUDA's own error ("invalid device ordinal"). So a
launch whose ranks claim GPUs they do not have -- FSDP2's default mesh
and DeepSpeed's accelerator call ``set_device(LOCAL_RANK)`` when a GPU is
visible: ranks 1-3 of lab 14's four gloo ranks on one GPU (issue 47) --
fails here as it would there. Only what is visible is rehearsed: a rank
that goes on to compute on the pretended GPU fails (this torch has no
CUDA), which is a failure too.
"""
from __future__ import annotations

import os

ENV = "LABKIT_REHEARSE_GPUS"


def visible(n: int, env=None) -> int:
    """GPUs a process sees on a node of ``n``: none when
    ``CUDA_VISIBLE_DEVICES`` is set and empty (the runtime's rule)."""
    env = os.environ if env is None else env
    return 0 if env.get("CUDA_VISIBLE_DEVICES") == "" else n


def pretend(n: int) -> int:
    """Make this process's torch show ``visible(n)`` GPUs (none: torch
    is left as it is). Returns that count."""
    import torch
    count = visible(n)
    if count == 0:
        return 0

    def set_device(device):
        i = device if isinstance(device, int) else \
            torch.device(device).index or 0
        if i >= count:
            raise RuntimeError(f"CUDA error: invalid device ordinal "
                               f"(device {i}; {count} visible, rehearsed)")
        raise RuntimeError(f"set_device({i}): this rank claimed a GPU "
                           "(rehearsed: no CUDA here)")
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: count
    torch.cuda.set_device = set_device
    torch._C._get_accelerator = lambda: torch.device("cuda")
    return count
