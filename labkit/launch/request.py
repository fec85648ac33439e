"""Check a launch request and choose its backend, before anything starts.

Everything here runs in the caller's process and raises ``ValueError``
for a bad request: a world size, a backend without its GPUs, a run folder
that holds someone else's files. Nothing is started, nothing deleted.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_TIMEOUT_S = 300.0
# written into every run folder launch makes; only such a folder is
# ever emptied by a later launch
MARKER = ".labkit-launch"


def cuda_device_count() -> int:
    """Number of visible CUDA GPUs (0 without a CUDA build of torch);
    under a rehearsal, the described node's (:mod:`labkit.rehearse`)."""
    from labkit.rehearse.node import rehearsed
    node = rehearsed()
    if node:
        return node.gpus
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a hard requirement
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def pick_backend(nproc: int, backend: str | None = None,
                 require_gpu: bool = False) -> str:
    """Validate the request and choose nccl or gloo, before anything starts."""
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        raise ValueError(f"world size must be an integer >= 1, got {nproc!r}")
    gpus = cuda_device_count()
    if require_gpu and gpus < nproc:
        raise ValueError(
            f"this profile needs {nproc} CUDA GPUs, {gpus} are visible; "
            "use the cpu profile on a machine without GPUs")
    if backend is None:
        backend = "nccl" if gpus >= nproc else "gloo"
    if backend not in ("nccl", "gloo"):
        raise ValueError(f"unknown backend {backend!r}: use 'nccl' or 'gloo'")
    if backend == "nccl" and gpus < nproc:
        raise ValueError(f"nccl needs one GPU per rank: {nproc} ranks, "
                         f"{gpus} GPUs visible")
    return backend


def checkout_pythonpath(env=None) -> str:
    """PYTHONPATH with this checkout first, so that child processes (ranks,
    notebook kernels) import this labkit whatever else is installed."""
    env = os.environ if env is None else env
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
            if p and p != str(ROOT)]
    return os.pathsep.join([str(ROOT), *rest])


def check_run_dir(run_dir: Path) -> None:
    """Refuse a non-empty folder that no earlier launch made."""
    if run_dir.is_symlink():   # emptying it would empty its target
        raise ValueError(f"run_dir {run_dir} is a symbolic link: pass the "
                         "folder itself (or none: a fresh one under "
                         "_build/runs)")
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"run_dir {run_dir} is a file, not a folder")
    if run_dir.is_dir() and any(run_dir.iterdir()) \
            and not (run_dir / MARKER).exists():
        raise ValueError(
            f"run_dir {run_dir} is not empty and was not made by "
            "labkit.launch: nothing was deleted; pass an empty or new "
            "folder (or none: a fresh one under _build/runs)")


def fresh_run_dir(run_dir: Path) -> None:
    """Empty a folder an earlier launch made (or make it), and mark it."""
    check_run_dir(run_dir)
    if (run_dir / MARKER).exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / MARKER).write_text("made by labkit.launch; a later launch "
                                  "into this folder empties it\n")


def as_argv(args) -> list[str]:
    """A list of strings, or a dict as ``--key value`` flags (``True``: a
    bare flag; ``False``/``None``: left out; lists joined with commas)."""
    if isinstance(args, dict):
        argv = []
        for k, v in args.items():
            flag = "--" + k.replace("_", "-")
            if v is True:
                argv.append(flag)
            elif v is False or v is None:
                continue
            elif isinstance(v, (list, tuple)):
                argv += [flag, ",".join(str(x) for x in v)]
            else:
                argv += [flag, str(v)]
        return argv
    return [str(a) for a in args]
