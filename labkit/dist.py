"""The rank side of a launch: join the process group, pick the device, save JSON.

Every entry module under ``labkit.runs`` does::

    ctx = dist.init()              # reads torchrun's RANK, WORLD_SIZE, ...
    ...train, measure...
    dist.save(ctx, {"loss": losses, ...})   # -> $LABKIT_RUN_DIR/rank-<r>.json
    dist.close()

The backend comes from ``LABKIT_BACKEND`` (set by :func:`labkit.launch.launch`),
or, run by hand under torchrun, nccl if CUDA is there and gloo otherwise.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as tdist


@dataclass
class Context:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"


def pick_backend() -> str:
    """``LABKIT_BACKEND``, else nccl where CUDA is and gloo elsewhere."""
    return os.environ.get("LABKIT_BACKEND") or (
        "nccl" if torch.cuda.is_available() else "gloo")


def deterministic() -> None:
    """Bit-identical reruns on a GPU, as on CPU (``LABKIT_DETERMINISTIC=1``).

    On CUDA the default kernels are not all deterministic: SDPA's
    memory-efficient and flash backward and the embedding backward add
    with atomics, cuBLAS picks split-K reductions by workspace. So:
    ``torch.use_deterministic_algorithms`` (deterministic embedding
    backward, errors on ops that have none), cuBLAS's fixed workspace
    (``CUBLAS_WORKSPACE_CONFIG``, read when its first handle is made), and
    SDPA on its math backend only (plain matmuls and softmax). Slower; only
    lab 8's resume check asks for it. Harmless on CPU.

    And NCCL without NVLS (``NCCL_ALGO=^NVLS``, unless ``NCCL_ALGO`` is
    set): on NVSwitch nodes (H100/H200 HGX) NCCL picks NVLS, whose
    reduction in the switch is "not deterministic between different
    calls" (NCCL's maintainers, NVIDIA/nccl#1497); ring and tree are
    deterministic for a fixed world size. Set before the process group
    makes its communicators (:func:`init` calls this first).
    """
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    os.environ.setdefault("NCCL_ALGO", "^NVLS")
    torch.use_deterministic_algorithms(True)
    for kind in ("flash", "mem_efficient", "cudnn"):
        switch = getattr(torch.backends.cuda, f"enable_{kind}_sdp", None)
        if switch:
            switch(False)
    torch.backends.cuda.enable_math_sdp(True)


def init(timeout_s: float = 120.0) -> Context:
    """Initialise torch.distributed from torchrun's environment (and the
    deterministic kernels of :func:`deterministic` when
    ``LABKIT_DETERMINISTIC=1``)."""
    from datetime import timedelta
    if os.environ.get("LABKIT_DETERMINISTIC") == "1":
        deterministic()
    backend = pick_backend()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if not tdist.is_initialized():
        kw = {"device_id": device} if backend == "nccl" else {}
        tdist.init_process_group(backend, timeout=timedelta(seconds=timeout_s),
                                 **kw)
    return Context(rank=tdist.get_rank(), world_size=tdist.get_world_size(),
                   local_rank=local_rank, backend=backend, device=device)


def save(ctx: Context, record: dict) -> Path:
    """Write this rank's result record as JSON where the launcher looks."""
    run_dir = Path(os.environ.get("LABKIT_RUN_DIR", "."))
    run_dir.mkdir(parents=True, exist_ok=True)
    out = run_dir / f"rank-{ctx.rank}.json"
    record = {"rank": ctx.rank, "world_size": ctx.world_size,
              "backend": ctx.backend, **record}
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1, default=_jsonable))
    tmp.replace(out)
    return out


def sync(ctx: Context) -> None:
    """Wait for the GPU (a no-op on CPU) so wall-clock timings are honest."""
    if ctx.is_cuda:
        torch.cuda.synchronize()


def release(ctx: Context) -> None:
    """Give back a finished model's memory before the next one is built
    (callers ``del`` their references first)."""
    import gc
    gc.collect()
    if ctx.is_cuda:
        torch.cuda.empty_cache()


def close() -> None:
    if tdist.is_initialized():
        tdist.barrier()
        tdist.destroy_process_group()


def _jsonable(x):
    if isinstance(x, torch.Tensor):
        return x.tolist()
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"cannot write {type(x).__name__} as JSON")
