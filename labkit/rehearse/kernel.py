"""The device a lab's own kernel measures on: the GPU, or the rehearsal's.

    from labkit.rehearse.kernel import kernel_device
    on = kernel_device(profile)
    with on.enter():
        with on.device:                 # built where it runs
            net = build_arch(record)
        got = measure(net, x, y)        # labkit.measure.activations
    want = AA.saved(record, seq, mb, precision, recompute, device=on.kind)

Most cells launch ranks; a few measure in the notebook's own process
(lab 1's activations kept per precision and recompute mode). Where that
process runs:

- the ``cpu`` profile: the CPU (nothing to enter);
- a GPU profile on a machine with CUDA: ``cuda`` (nothing to enter);
- a GPU profile under a rehearsal (``LABKIT_REHEARSE`` names the node):
  ``meta`` on fake tensors, as a rehearsed rank's GPU is
  (:mod:`labkit.rehearse.world`): CUDA's autocast and fused attention
  stood in for, at the real size and in no real memory; its ``kind`` is
  ``cuda``, the device the ledgers price. Without this the
  cell took ``cuda`` to be absent and built the real-size model on the
  CPU (lab 1's gpu8 rehearsal: killed at 13.3 GB of the machine's 24);
- a GPU profile on a machine with neither: the CPU, as before.

Values fake tensors cannot produce stay NaN; bytes are shapes and dtypes,
so a cell's byte ledger is compared at the real size.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import torch


@dataclass(frozen=True)
class KernelDevice:
    device: torch.device     # where the cell makes its tensors
    kind: str                # what it stands for: "cpu" or "cuda"
    enter: Callable          # entered around the work


@contextlib.contextmanager
def _fake_gpu():
    from torch import nn
    from torch._subclasses.fake_tensor import FakeTensorMode
    from labkit.dryrun.fake import _apply_fake
    from labkit.rehearse.attention import cuda_attention
    from labkit.rehearse.autocast import patched_autocast
    # Module.to(dtype) would swap fake parameters, which a weak reference
    # (the measurement's) forbids: the dry run's replacement assigns them
    original = nn.Module._apply
    nn.Module._apply = _apply_fake(original)
    try:
        with FakeTensorMode(allow_non_fake_inputs=True), patched_autocast(), \
                cuda_attention():
            yield
    finally:
        nn.Module._apply = original


def kernel_device(profile: str) -> KernelDevice:
    """Where a measurement in the notebook's own process runs; see the
    module doc."""
    from labkit.rehearse.node import rehearsed
    if profile != "cpu" and torch.cuda.is_available():
        return KernelDevice(torch.device("cuda"), "cuda", contextlib.nullcontext)
    if profile != "cpu" and rehearsed() is not None:
        return KernelDevice(torch.device("meta"), "cuda", _fake_gpu)
    return KernelDevice(torch.device("cpu"), "cpu", contextlib.nullcontext)
