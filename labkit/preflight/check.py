"""One preflight line, and how many ranks a profile asks for.

    from labkit.preflight.check import Check, ranks_needed
    Check("gpus", "ok", "8 x NVIDIA H100 80GB HBM3", "8")

Shared by the checks of :mod:`labkit.preflight` (devices and memory in
:mod:`labkit.preflight.gpu`, software in :mod:`labkit.preflight.software`,
links in :mod:`labkit.preflight.link`) and by the rehearsal
(:mod:`labkit.rehearse`), which runs the same checks against a described
node.
"""
from __future__ import annotations

from dataclasses import dataclass

STATUS = {"ok": 0, "warn": 1, "fail": 2}
RANK_KEYS = ("world_size", "world_sizes", "tp_sizes", "stages",
             "sweep_stages")   # and any "<what>_world_size"


@dataclass
class Check:
    name: str
    status: str      # ok / warn / fail
    found: str
    need: str = ""
    fix: str = ""


def gb(x: float) -> str:
    return f"{x / 1e9:.1f} GB"


def lab_ranks(params: dict) -> int:
    """The most processes (one GPU each) one launch of a lab starts; a
    lab whose ranks are told to run on gloo (``ranks_backend: gloo``, lab
    14 on one GPU) needs one GPU, for its CUDA-only cells."""
    if (params or {}).get("ranks_backend") == "gloo":
        return 1
    most = 1
    for key, v in (params or {}).items():
        if key in RANK_KEYS or key.endswith("_world_size"):
            for n in (v if isinstance(v, list) else [v]):
                if isinstance(n, int) and not isinstance(n, bool):
                    most = max(most, n)
    return most


def ranks_needed(profile: dict) -> int:
    """The most processes one launch of the profile starts."""
    return max((lab_ranks(p) for p in profile.values()), default=1)
