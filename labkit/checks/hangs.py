"""Lab 17 (``hangs``): the planted faults, the culprit and the timeout.

    on_gpu = check("hangs", globals())            # in labs/17_hangs
    from labkit.checks import hangs
    on_gpu = hangs(profile="cpu", world_size=3, culprit=2, at=2, steps=4,
                   faults=["skip", "dead"], hang_timeout_s=2.0,
                   nccl_env={}, timeout_s=120)

One clear line for the first bad parameter, before any process starts:
an unknown fault, a culprit that is not a rank, a step outside the run,
fewer than three ranks (with two, every tool's "the other rank differs"
accuses both), a launch timeout too short for the planted hang to time
out, an environment value that is not a string.
"""
from __future__ import annotations

from labkit.checks.common import _known
from labkit.checks.rules import require

PROFILES = ("cpu", "gpu1", "gpu8")


def hangs(profile, world_size, culprit, at, steps, faults, hang_timeout_s,
          nccl_env, timeout_s):
    """Lab 17. Returns ``on_gpu``."""
    from labkit.predict.hangs import NAMES
    require(profile in PROFILES, f"unknown profile {profile!r}")
    require(isinstance(world_size, int) and world_size >= 3,
            f"world_size must be >= 3 (the culprit is the rank the others "
            f"disagree with; with 2 each names the other), got "
            f"{world_size!r}")
    require(isinstance(culprit, int) and 0 < culprit < world_size,
            f"culprit must be a rank in 1..{world_size - 1} (rank 0 is "
            f"every tool's reference), got {culprit!r}")
    require(isinstance(steps, int) and steps >= 1,
            f"steps must be an integer >= 1, got {steps!r}")
    require(isinstance(at, int) and 0 <= at < steps,
            f"at must be a step of the run (0..{steps - 1}), got {at!r}")
    require(isinstance(faults, list) and faults,
            f"faults must be a non-empty list, got {faults!r}")
    _known(faults, NAMES, "fault")
    require(timeout_s > 4 * hang_timeout_s + 30,
            f"timeout_s={timeout_s} must leave the planted hang time to "
            f"time out: more than 4 x hang_timeout_s + 30 s")
    require(isinstance(nccl_env, dict) and all(
        isinstance(k, str) and isinstance(v, str)
        for k, v in nccl_env.items()),
            "nccl_env must map variable names to strings")
    on_gpu = profile != "cpu"
    from labkit.launch import pick_backend
    pick_backend(world_size, require_gpu=on_gpu)
    return on_gpu
