"""Tensors as plain data across the rank wall, and their distance.

    flat(t)                   # rank side: float32 bytes, base64 (or None)
    gap(mine, want)           # checker side: max |mine - want|, inf when
                              # missing, malformed or of another size

The checks of a build-it part never trust a number a rank computed about
itself: the ranks hand over their final tensors as plain data and the
checks compare them with a reference computed in the checking process
(``reference`` in each harness).
"""
from __future__ import annotations

import math


def flat(t) -> str | None:
    if t is None:
        return None
    import base64
    a = t.detach().float().contiguous().flatten().numpy()
    return base64.b64encode(a.astype("<f4").tobytes()).decode()


def gap(mine, want) -> float:
    """Largest absolute difference of ``flat`` data and a tensor."""
    import base64
    import binascii

    import numpy as np
    import torch
    if type(mine) is not str or len(mine) > 8 * want.numel() + 8:
        return math.inf
    try:
        raw = base64.b64decode(mine, validate=True)
    except (binascii.Error, ValueError):
        return math.inf
    if len(raw) != 4 * want.numel():
        return math.inf
    got = torch.from_numpy(np.frombuffer(raw, dtype="<f4").astype("f8"))
    d = (got - want.detach().double().flatten()).abs().max()
    return math.inf if not torch.isfinite(d) else float(d)


def cache_key(cfg: dict, world: int) -> tuple:
    import json
    return json.dumps(cfg, sort_keys=True), world
