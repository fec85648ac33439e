"""Where and with what a lab was measured: the provenance of its numbers.

    from labkit.results.provenance import collect, stamp
    prov = collect("gpu8")      # device, GPUs, versions, date, commit, ...
    stamp(prov, world_size=8)   # "measured on 8x NVIDIA H100 80GB HBM3, ..."

``labkit.lab.Results`` attaches it to every record, the lab runner to
``run.json`` and to the executed notebook's metadata
(``metadata.labkit.provenance``); the book build puts :func:`record` at
the top of each lab page, which says it with :func:`stamp` in the page's
language (``book/_ext/lab_stamp.py``). Versions are read without
importing DeepSpeed (``importlib.metadata``); the commit is ``git
rev-parse`` of this checkout, ``+dirty`` when it has uncommitted changes.
"""
from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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


# The stamp's words per edition of the book (issue 32): the book build
# writes the record (``record``), ``book/_ext/lab_stamp.py`` says it in the
# page's language with this one table. The record's values (device, torch,
# date, commit, profile) are the same in every language.
STAMP = {
    "en": {"not_run": "Not run in this build: the lab is shown as "
                      "committed, without outputs.",
           "tail": "torch {torch}, {date}, commit {commit}",
           "unknown": "unknown",
           "gpu": "Measured on {n}\u00d7 {model}, {tail}, CUDA {cuda}, "
                  "NCCL {nccl} (profile {profile}).",
           "processes": ", {n} processes",
           "cpu": "CPU profile (gloo{procs}): {device}, {tail} "
                  "(profile {profile})."},
    "zh": {"not_run": "本次构建未运行此实验：页面按提交时的样子显示，"
                      "没有输出。",
           "tail": "torch {torch}，{date}，提交 {commit}",
           "unknown": "未知",
           "gpu": "测量于 {n}\u00d7 {model}，{tail}，CUDA {cuda}，"
                  "NCCL {nccl}（profile {profile}）。",
           "processes": "，{n} 个进程",
           "cpu": "CPU profile（gloo{procs}）：{device}，{tail}"
                  "（profile {profile}）。"},
}
# the facts of a provenance record that the stamp says
STAMPED = ("device", "gpu_count", "gpu_model", "torch", "cuda", "nccl",
           "date", "commit", "profile")


def record(prov: dict | None, world_size: int | None = None) -> dict:
    """What a lab page's stamp says, as data (JSON): the stamped facts of
    ``prov`` and the world size; ``{}`` when the lab was not run."""
    if not prov:
        return {}
    return {**{k: prov.get(k) for k in STAMPED}, "world_size": world_size}


def stamp(prov: dict | None, world_size: int | None = None,
          lang: str = "en") -> str:
    """One line for the top of a lab page, in ``lang`` (a key of STAMP)."""
    say = STAMP[lang]
    if not prov:
        return say["not_run"]
    tail = say["tail"].format(torch=prov["torch"], date=prov["date"][:10],
                              commit=prov["commit"] or say["unknown"])
    if prov.get("gpu_count") and prov["profile"] != "cpu":
        return say["gpu"].format(n=prov["gpu_count"], model=prov["gpu_model"],
                                 tail=tail, cuda=prov["cuda"],
                                 nccl=prov["nccl"], profile=prov["profile"])
    procs = say["processes"].format(n=world_size) if world_size else ""
    return say["cpu"].format(procs=procs, device=prov["device"], tail=tail,
                             profile=prov["profile"])


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
