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

import shutil
from dataclasses import dataclass

from labkit import disk

# "skip": one lab cannot run here (``Check.lab`` names it, ``fix`` says
# why); the others run, so it weighs as a warning, never as a failure
STATUS = {"ok": 0, "warn": 1, "skip": 1, "fail": 2}
RANK_KEYS = ("world_size", "world_sizes", "tp_sizes", "stages",
             "sweep_stages")   # and any "<what>_world_size"


@dataclass
class Check:
    name: str
    status: str      # ok / warn / skip / fail
    found: str
    need: str = ""
    fix: str = ""
    lab: str = ""    # the one lab this line judges ("": the whole run)
    # parameters the lab runs with instead (its fallback), e.g.
    # {"fp8": "emulated"} for lab 14 on a GPU without FP8 tensor cores
    fallback: dict | None = None


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


def folder_checks(profile: str, need_bytes: float = disk.MIN_FREE) -> list:
    """Preflight's lines for :func:`labkit.disk.lab_folders`: writable,
    and ``need_bytes`` free in each."""
    checks = []
    for folder in disk.lab_folders(profile):
        try:
            disk.check_writable(folder, need_bytes)
            free = shutil.disk_usage(folder).free
            checks.append(Check(f"writable {folder.name}", "ok",
                                f"{free / 1e9:.1f} GB free at {folder}",
                                f"writable, {need_bytes / 2**20:.0f} MiB"))
        except ValueError as e:
            checks.append(Check(f"writable {folder.name}", "fail", str(e),
                                f"writable, {need_bytes / 2**20:.0f} MiB",
                                "free space, or make _build/ writable"))
    return checks
