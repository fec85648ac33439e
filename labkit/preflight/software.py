"""Preflight's software lines: the torch build, DeepSpeed's ops, nvcc.

    from labkit.preflight.software import check_torch, check_deepspeed
    check_torch("gpu8"); check_deepspeed(load_profile("gpu8"))
    check_nvcc("gpu8", load_profile("gpu8"))

torch: gloo on the cpu profile; on a GPU profile a CUDA build with NCCL.
DeepSpeed: the ops lab 4 compiles (``ds_report``'s "compatible" column,
asked from the same op builders). nvcc: lab 9's Gemini JIT-builds
Colossal-AI's CUDA kernels (:func:`check_nvcc`).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from labkit.predict.labtime import deepspeed_ops
from labkit.preflight.check import Check


def check_torch(name: str) -> list[Check]:
    import torch
    import torch.distributed as tdist
    if name == "cpu":
        ok = tdist.is_available() and tdist.is_gloo_available()
        return [Check("torch", "ok" if ok else "fail",
                      f"torch {torch.__version__}, gloo "
                      f"{'available' if ok else 'missing'}", "gloo",
                      "" if ok else "reinstall torch from requirements.txt")]
    if not torch.version.cuda:
        return [Check("torch", "fail", f"torch {torch.__version__} (CPU build)",
                      "a CUDA build", "pip install torch from the CUDA index "
                      "(https://pytorch.org/get-started/locally/)")]
    nccl = (".".join(map(str, torch.cuda.nccl.version()))
            if tdist.is_nccl_available() else "missing")
    return [Check("torch", "ok" if nccl != "missing" else "fail",
                  f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
                  f"NCCL {nccl}", "CUDA + NCCL")]


def check_deepspeed(profile: dict) -> list[Check]:
    import contextlib
    import sys
    try:  # DeepSpeed logs to stdout on import: keep --json's stdout clean
        with contextlib.redirect_stdout(sys.stderr):
            import deepspeed
            from deepspeed.ops.op_builder.all_ops import ALL_OPS
    except Exception as e:  # noqa: BLE001 - any import failure is the fact
        return [Check("deepspeed", "fail", f"import failed: {e}",
                      "deepspeed", "pip install -r requirements.txt")]
    ops, optional = deepspeed_ops(profile), deepspeed_ops(profile, True)
    if not ops and not optional:
        return [Check("deepspeed ops", "ok", f"deepspeed {deepspeed.__version__}",
                      "no op compiled by this profile")]
    out = []
    for need, status, what in ((ops, "fail", "lab 4"),
                               (optional, "warn", "lab 4's optional NVMe "
                                "cell (it reports the failure and goes on)")):
        if not need:
            continue
        bad = [op for op in need if not ALL_OPS[op].is_compatible(verbose=False)]
        out.append(Check(
            "deepspeed ops", status if bad else "ok",
            f"deepspeed {deepspeed.__version__}: " + ", ".join(
                f"{op} {'NOT compatible' if op in bad else 'compatible'}"
                for op in need), f"{', '.join(need)} for {what}",
            "see `ds_report`; async_io needs libaio-dev" if bad else ""))
    return out


ROOT = Path(__file__).resolve().parents[2]
CAI_VENV = ROOT / ".venv-colossalai"
DEFAULT_HOME = "/usr/local/cuda"   # torch's last guess


def _cuda_home(env) -> str | None:
    """Where ``torch.utils.cpp_extension`` looks (its ``_find_cuda_home``):
    CUDA_HOME or CUDA_PATH, else nvcc on PATH, else /usr/local/cuda."""
    home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    if home:
        return home
    nvcc = shutil.which("nvcc", path=env.get("PATH"))
    if nvcc:
        return os.path.dirname(os.path.dirname(nvcc))
    return DEFAULT_HOME if os.path.exists(DEFAULT_HOME) else None


def cai_torch_cuda(venv: Path = CAI_VENV) -> str | None:
    """The CUDA version Colossal-AI's torch was built with, read from its
    ``torch/version.py`` (no import); else the CUDA runtime pinned in
    requirements-colossalai.txt."""
    for f in sorted(venv.glob("lib/python3*/site-packages/torch/version.py")):
        m = re.search(r"^cuda\b[^=]*=\s*['\"]([\d.]+)", f.read_text(), re.M)
        if m:
            return m.group(1)
    req = ROOT / "requirements-colossalai.txt"
    m = re.search(r"^nvidia-cuda-runtime-cu\d+==(\d+\.\d+)",
                  req.read_text() if req.is_file() else "", re.M)
    return m.group(1) if m else None


def nvcc_release(text: str) -> str | None:
    """``nvcc -V``'s "release 12.4," as "12.4" (Colossal-AI parses the
    same word: ``kernel/extensions/utils.py``)."""
    m = re.search(r"\brelease (\d+)\.(\d+)", text)
    return f"{m.group(1)}.{m.group(2)}" if m else None


def _nvcc_version(home: str) -> tuple[str | None, str]:
    nvcc = Path(home) / "bin" / "nvcc"
    if not nvcc.exists():
        return None, f"no nvcc at {nvcc}"
    try:
        out = subprocess.run([str(nvcc), "-V"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{nvcc} -V failed: {e}"
    rel = nvcc_release(out)
    return rel, (f"nvcc {rel} at {nvcc}" if rel else
                 f"{nvcc} -V printed no release")


def uses_gemini(profile: dict) -> bool:
    cai = profile.get("colossalai") or {}
    return "gemini" in [*cai.get("plugins", []), *cai.get("compare", [])]


def check_nvcc(name: str, profile: dict, env=None, torch_cuda=None,
               version=_nvcc_version) -> list[Check]:
    """Lab 9's GeminiPlugin takes HybridAdam, whose fused CUDA Adam
    Colossal-AI 0.5.0 builds on first use (no prebuilt op in
    ``colossalai._C``) with ``torch.utils.cpp_extension.load``: it needs
    CUDA_HOME and an nvcc of the CUDA major its torch was built with, and
    refuses another major (``check_system_pytorch_cuda_match``; a minor
    mismatch only warns). ``version(home)``: (release, what was found).
    Only lab 9 (``colossalai``) needs it: without it that lab is skipped,
    with the fix, and the others run."""
    if name == "cpu" or not uses_gemini(profile):
        return []
    env = os.environ if env is None else env
    want = torch_cuda or cai_torch_cuda() or "12"
    major = want.split(".")[0]
    need = (f"nvcc of CUDA {major} (Colossal-AI's torch: CUDA {want}) "
            "for lab 9's Gemini JIT build")
    fix = (f"install NVIDIA's CUDA {want} toolkit (apt: cuda-toolkit-"
           f"{want.replace('.', '-')}) and export CUDA_HOME=/usr/local/"
           f"cuda-{want}")
    home = _cuda_home(env)
    if not home:
        return [Check("nvcc", "skip", "no CUDA_HOME and no nvcc", need, fix,
                      lab="colossalai")]
    rel, found = version(home)
    if rel is None or rel.split(".")[0] != major:
        return [Check("nvcc", "skip", found + (
            f" (CUDA {rel.split('.')[0]}: Colossal-AI refuses another "
            "major)" if rel else ""), need, fix, lab="colossalai")]
    if rel != want:
        return [Check("nvcc", "warn", f"{found} (minor differs: "
                      "Colossal-AI builds with a warning)", need, fix,
                      lab="colossalai")]
    return [Check("nvcc", "ok", found, need)]
