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
    return gpu_lines(profile, gpus, props.name, props.total_memory,
                     (props.major, props.minor))


# compute capability by GPU name, for a described node (nvidia-smi does
# not print it): NVIDIA's CUDA GPU list, developer.nvidia.com/cuda-gpus
CAPABILITY = ((r"\b(B100|B200|GB200|B300)\b", (10, 0)),
              (r"\b(H100|H200|H800|H20|GH200)\b", (9, 0)),
              (r"\b(L4|L40S?|RTX 40\d0|RTX 6000 Ada)\b", (8, 9)),
              (r"\b(A100|A800|A30)\b", (8, 0)),
              (r"\b(A10G?|A40|RTX 30\d0|RTX A6000)\b", (8, 6)),
              (r"\bT4\b", (7, 5)), (r"\bV100\b", (7, 0)))
FP8_CAPABILITY = (8, 9)   # FP8 tensor cores: Ada (sm_89) and later


def capability(gpu: str) -> tuple[int, int] | None:
    """The compute capability of a GPU named ``gpu``, or None."""
    import re
    return next((cap for pattern, cap in CAPABILITY
                 if re.search(pattern, gpu)), None)


def check_capability(profile: dict, gpu: str,
                     cap: tuple[int, int] | None) -> list[Check]:
    """The ``compute capability`` line: lab 14's real FP8 GEMM
    (``torch._scaled_mm``, ``precision.fp8: scaled_mm``) needs sm_89 or
    later; below, that lab falls back to ``fp8: emulated`` (the same
    scaled casts, an fp32 matmul) and the run goes on."""
    cap = cap or capability(gpu)
    sm = f"sm_{cap[0]}{cap[1]}" if cap else "unknown"
    wants = (profile.get("precision") or {}).get("fp8") == "scaled_mm"
    need = (f"sm_{FP8_CAPABILITY[0]}{FP8_CAPABILITY[1]}+ for lab 14's "
            "real FP8 GEMM" if wants else "any (no lab needs FP8 cores)")
    if not wants or (cap and cap >= FP8_CAPABILITY):
        return [Check("compute capability", "ok", f"{sm} ({gpu})", need)]
    return [Check("compute capability", "warn", f"{sm} ({gpu}): no FP8 "
                  "tensor cores", need, "lab 14 runs with fp8: emulated "
                  "(the same scaled casts, an fp32 matmul)",
                  lab="precision", fallback={"fp8": "emulated"})]


def gpu_lines(profile: dict, gpus: int, gpu: str, total_bytes: float,
              cap: tuple[int, int] | None = None) -> list[Check]:
    """The ``gpus``, compute-capability and memory lines for ``gpus``
    GPUs of ``total_bytes`` each (a real node, or the node a rehearsal
    describes; ``cap`` from the GPU's name when not given)."""
    ranks = ranks_needed(profile)
    short = [] if gpus >= ranks else [Check(
        "gpus", "warn", f"{gpus} CUDA GPUs", f"{ranks} for every lab",
        f"labs that need more than {gpus} GPUs are skipped (run_labs "
        "says which); use a node with more GPUs to run them")]
    return [*(short or [Check("gpus", "ok", f"{gpus} x {gpu}",
                              f"{ranks}")]),
            *check_capability(profile, gpu, cap),
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
