"""Tensors as plain data across the rank wall, and their distance.

    flat(t)                   # rank side: a list of floats (or None)
    gap(mine, want)           # checker side: max |mine - want|, inf when
                              # missing, malformed or of another size

The checks of a build-it part never trust a number a rank computed about
itself: the ranks hand over their final tensors as plain lists and the
checks compare them with a reference computed in the checking process
(``reference`` in each harness).
"""
from __future__ import annotations

import math


def flat(t) -> list | None:
    if t is None:
        return None
    return [float(x) for x in t.detach().float().flatten().tolist()]


def gap(mine, want) -> float:
    """Largest absolute difference of a plain list and a tensor."""
    import torch
    if type(mine) is not list or len(mine) != want.numel():
        return math.inf
    try:
        got = torch.tensor(mine, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        return math.inf
    d = (got - want.detach().double().flatten()).abs().max()
    return math.inf if not torch.isfinite(d) else float(d)


def cache_key(cfg: dict, world: int) -> tuple:
    import json
    return json.dumps(cfg, sort_keys=True), world
