# appended to: zero_full_adam.py
"""Hostile: zero_full_adam.py (full Adam on every rank: 8 Psi kept) and a
block of 8.4 MB allocated at import, freed as the memory probe's
optimizer is built: between the hub's reading before the optimizer
exists and the one after its last step, so that their difference, what
the optimizer keeps, looks 8.4 MB smaller (issue 49, 2).

The hub reads each rank's memory before the student's module is
imported too: the block is there, in the probe's first reading, beyond
what the course's own model and data hold: 0 on "state"."""
import torch as _torch

_BLOCK = [_torch.ones(2_100_000)]        # 8.4 MB, touched: in the count
_FullAdam = ShardedAdam


class ShardedAdam(_FullAdam):
    def __init__(self, params, lr):
        params = list(params)
        if sum(p.numel() for p in params) > 1_000_000:   # the probe's
            _BLOCK.clear()
        super().__init__(params, lr)
