"""Lab 13 (``experts``): the experts must split over the expert-parallel
ranks, top-k must not exceed them, a capacity factor must be positive.

    on_gpu = check("experts", globals())          # in labs/13_experts

Raises one ``ValueError``; see :mod:`labkit.checks`.
"""
from __future__ import annotations

from labkit.checks.common import _profile, _sizes
from labkit.checks.rules import require


def experts(profile, world_size, ep, experts, top_k, capacity_factors,
            hidden, heads, expert_ffn, global_batch, steps, aux):
    """Lab 13. Returns ``on_gpu``."""
    from labkit.predict import experts as X

    on_gpu = _profile(profile)
    _sizes([world_size], "world_size", on_gpu)
    ints = dict(ep=ep, experts=experts, top_k=top_k, hidden=hidden,
                heads=heads, expert_ffn=expert_ffn,
                global_batch=global_batch)
    for name, v in ints.items():
        require(isinstance(v, int) and not isinstance(v, bool) and v >= 1,
                f"{name} must be a positive integer, got {v!r}")
    require(isinstance(capacity_factors, (list, tuple))
            and len(capacity_factors) > 0,
            f"capacity_factors must be a list of numbers > 0, got "
            f"{capacity_factors!r}")
    require(all(isinstance(c, (int, float)) and not isinstance(c, bool)
                for c in capacity_factors),
            f"capacity_factors must be numbers, got {capacity_factors!r}")
    try:
        X.check(experts, top_k, ep, world_size, capacity_factors)
    except ValueError as e:
        raise ValueError(str(e)) from None
    require(hidden % heads == 0 and heads % 2 == 0,
            f"heads ({heads}) must be even and divide hidden ({hidden})")
    require(global_batch % world_size == 0,
            f"global batch {global_batch} does not divide by {world_size}")
    require(isinstance(steps, int) and steps >= 0,
            f"steps must be an integer >= 0, got {steps!r}")
    require(isinstance(aux, (int, float)) and aux >= 0,
            f"aux (the aux-loss coefficient) must be >= 0, got {aux!r}")
    return on_gpu
