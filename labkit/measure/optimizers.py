"""Optimizer state as it is held: bytes of ``optimizer.state`` per rank.

    from labkit.measure import optimizers as M
    M.state_bytes(opts)          # every tensor in every state, this rank's
    M.state_kinds(opts)          # {key: bytes}: exp_avg, row_var, state1...

The twin of :func:`labkit.predict.optimizers.state_bytes`: it walks the
state dicts of the optimizers that train a model (one, or Muon beside
AdamW) and sums each tensor's bytes. A ``DTensor`` counts its local shard
only (what this rank allocated); an int (bitsandbytes' ``step``) is not a
tensor and counts 0, as the prediction says.
"""
from __future__ import annotations

import torch


def _nbytes(t: torch.Tensor) -> int:
    t = getattr(t, "_local_tensor", t)
    return t.numel() * t.element_size()


def state_kinds(opts: list) -> dict:
    """Bytes of the optimizers' states by key (``step`` included)."""
    out: dict = {}
    for opt in opts:
        for state in opt.state.values():
            for k, v in state.items():
                if isinstance(v, torch.Tensor):
                    out[k] = out.get(k, 0) + _nbytes(v)
    return out


def state_bytes(opts: list) -> int:
    """Bytes of every tensor in the optimizers' states, on this rank."""
    return sum(state_kinds(opts).values())
