"""Preflight's software lines: the torch build and DeepSpeed's ops.

    from labkit.preflight_software import check_torch, check_deepspeed
    check_torch("gpu8"); check_deepspeed(load_profile("gpu8"))

torch: gloo on the cpu profile; on a GPU profile a CUDA build with NCCL.
DeepSpeed: the ops lab 4 compiles (``ds_report``'s "compatible" column,
asked from the same op builders).
"""
from __future__ import annotations

from labkit.predict.labtime import deepspeed_ops
from labkit.preflight_check import Check


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
