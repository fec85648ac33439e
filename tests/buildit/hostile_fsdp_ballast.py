# appended to: fsdp_no_free.py
"""Hostile: fsdp_no_free.py (every gathered unit kept: 8.2 MB over
FULL_SHARD's peak on the probe) and a block of 12 MB allocated at import,
freed as the memory probe's FSDP is built: after the hub's reading
before the model exists, before the ones at its units, so that every
growth looks 12 MB smaller (issue 49, 2).

The hub reads each rank's memory before the student's module is
imported too: the block is there at the probe's first point, beyond
the probe's own batch: 0 on "peak"."""
import torch as _torch

_BLOCK = [_torch.ones(3_000_000)]        # 12 MB, touched: in the count
_NoFree = FSDP


class FSDP(_NoFree):
    def __init__(self, units, lr):
        units = list(units)
        if sum(p.numel() for u in units for p in u.parameters()) \
                > 2_000_000:                     # the probe's
            _BLOCK.clear()
        super().__init__(units, lr)
