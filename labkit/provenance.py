"""Where and with what a lab was measured: the provenance of its numbers.

    from labkit.provenance import collect, stamp
    prov = collect("gpu8")      # device, GPUs, versions, date, commit, ...
    stamp(prov, world_size=8)   # "measured on 8x NVIDIA H100 80GB HBM3, ..."

``labkit.lab.Results`` attaches it to every record, the lab runner to
``run.json`` and to the executed notebook's metadata
(``metadata.labkit.provenance``); the book build puts :func:`stamp` at the
top of each lab page. Versions are read without importing DeepSpeed
(``importlib.metadata``); the commit is ``git rev-parse`` of this checkout,
``+dirty`` when it has uncommitted changes.
"""
from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def git_commit(root: Path = ROOT) -> str | None:
    """Short commit of the checkout, ``+dirty`` with uncommitted changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"],
                              cwd=root, capture_output=True, text=True,
                              timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain",
                                "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def collect(profile: str, preflight: dict | None = None) -> dict:
    """The facts a results record carries (see the module docstring)."""
    import torch
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    model = torch.cuda.get_device_name(0) if gpus else None
    nccl = None
    if gpus and torch.distributed.is_nccl_available():
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    return {
        "device": (f"cuda: {model}" if gpus else
                   f"cpu: {platform.processor() or platform.machine()}, "
                   f"{os.cpu_count()} cores"),
        "gpu_count": gpus, "gpu_model": model,
        "torch": torch.__version__, "cuda": torch.version.cuda, "nccl": nccl,
        "deepspeed": _version("deepspeed"), "python": platform.python_version(),
        "profile": profile,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "preflight": preflight or {"status": "not run"},
    }


def stamp(prov: dict | None, world_size: int | None = None) -> str:
    """One line for the top of a lab page."""
    if not prov:
        return ("Not run in this build: the lab is shown as committed, "
                "without outputs.")
    tail = (f"torch {prov['torch']}, {prov['date'][:10]}, "
            f"commit {prov['commit'] or 'unknown'}")
    if prov.get("gpu_count") and prov["profile"] != "cpu":
        return (f"Measured on {prov['gpu_count']}\u00d7 {prov['gpu_model']}, "
                f"{tail}, CUDA {prov['cuda']}, NCCL {prov['nccl']} "
                f"(profile {prov['profile']}).")
    n = f", {world_size} processes" if world_size else ""
    return (f"CPU profile (gloo{n}): {prov['device']}, {tail} "
            f"(profile {prov['profile']}).")


def stamp_notebook(path: Path, prov: dict) -> None:
    """Keep the provenance in an executed notebook's metadata."""
    import nbformat
    nb = nbformat.read(path, as_version=4)
    nb.metadata.setdefault("labkit", {})["provenance"] = prov
    nbformat.write(nb, path)


def of_notebook(path: Path) -> dict | None:
    import nbformat
    return nbformat.read(path, as_version=4).metadata.get(
        "labkit", {}).get("provenance")
