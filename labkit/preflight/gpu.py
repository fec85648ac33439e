"""Preflight's GPU lines: how many CUDA GPUs torch sees, and why none.

    from labkit.preflight.gpu import check_devices
    check_devices("gpu8", load_profile("gpu8"))

The memory line is :func:`labkit.preflight.memory.check_memory`, lab by
lab, against the first GPU's memory.
"""
from __future__ import annotations

import os

from labkit.preflight.check import Check, ranks_needed
from labkit.preflight.memory import check_memory


def largest_model(profile: dict) -> tuple[str, int, bool]:
    """(lab, parameters, bf16) of the largest ``model`` in the profile."""
    from labkit.predict.model.params import lab_params
    best = ("", 0, False)
    for lab, params in profile.items():
        m = (params or {}).get("model")
        if isinstance(m, dict):
            psi = lab_params(m)
            if psi > best[1]:
                best = (lab, psi, bool(params.get("bf16")))
    return best


def check_devices(name: str, profile: dict) -> list[Check]:
    from labkit.launch.request import cuda_device_count
    ranks = ranks_needed(profile)
    if name == "cpu":
        cores = os.cpu_count() or 1
        return [Check("cpu cores", "ok" if cores >= 2 else "warn",
                      f"{cores} cores", ">= 2 (budgets are measured on 2)",
                      "" if cores >= 2 else "expect slower labs")]
    gpus = cuda_device_count()
    if gpus == 0:
        return [no_gpus(name, ranks)]
    import torch
    props = torch.cuda.get_device_properties(0)
    return gpu_lines(profile, gpus, props.name, props.total_memory)


def gpu_lines(profile: dict, gpus: int, gpu: str,
              total_bytes: float) -> list[Check]:
    """The ``gpus`` and memory lines for ``gpus`` GPUs of ``total_bytes``
    each (a real node, or the node a rehearsal describes)."""
    ranks = ranks_needed(profile)
    short = [] if gpus >= ranks else [Check(
        "gpus", "warn", f"{gpus} CUDA GPUs", f"{ranks} for every lab",
        f"labs that need more than {gpus} GPUs are skipped (run_labs "
        "says which); use a node with more GPUs to run them")]
    return [*(short or [Check("gpus", "ok", f"{gpus} x {gpu}",
                              f"{ranks}")]),
            *check_memory(profile, gpu, total_bytes, gpus)]


def no_gpus(name: str, ranks: int, smi_text: str | None = None) -> Check:
    """torch sees no GPU: say why when the driver is the reason (a CUDA
    build newer than the driver, a CPU build on a GPU node), not just "0"."""
    import torch
    from labkit import node
    text = node.nvidia_smi() if smi_text is None else smi_text
    found = node.parse_nvidia_smi(text) if text else None
    why = node.mismatch(torch.__version__, torch.version.cuda, found)
    if why is None and found and found.gpus and not torch.version.cuda:
        why = (f"torch {torch.__version__} is a CPU build on a node with "
               f"{len(found.gpus)} x {found.gpus[0]} (driver "
               f"{found.driver}, CUDA {found.cuda}): run `make setup` "
               "again (it picks the CUDA build for the driver)")
    if why:
        return Check("gpus", "fail", f"0 CUDA GPUs visible to torch; "
                     f"nvidia-smi: {len(found.gpus)} GPU(s), driver "
                     f"{found.driver}", f"{ranks} CUDA GPUs", why)
    return Check("gpus", "fail", "0 CUDA GPUs", f"{ranks} CUDA GPUs",
                 f"the {name} profile needs {ranks} CUDA GPUs: use a "
                 "node that has them, or --profile cpu")
