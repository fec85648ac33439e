"""The steps of the GPU check that run in its own script (``--step``).

    python scripts/gpu_check.py --step zero --out /tmp/gc --cpu

``versions`` (what the check ran with), ``zero`` (DeepSpeed ZeRO-0..3 and
the offloads at one rank against lab 4's explanation rule) and
``checkpoint`` (kill-and-resume, bit for bit). They import labkit (the
step's PYTHONPATH has the checkout first).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from .plan import ZERO_CPU, ZERO_GPU, ZERO_VARIANTS


def versions(out: Path) -> dict:
    """What the check ran with: Python, packages, CUDA, nvidia-smi."""
    import importlib.metadata as md
    import platform
    v = {"python": platform.python_version(), "machine": platform.machine()}
    for name in ("torch", "deepspeed", "numpy", "papermill",
                 "HolisticTraceAnalysis", "pydantic", "triton"):
        try:
            v[name] = md.version(name)
        except md.PackageNotFoundError:
            v[name] = None
    try:
        import torch
        v["torch_cuda"] = torch.version.cuda
        v["cuda_available"] = torch.cuda.is_available()
        if v["cuda_available"]:
            v["gpu"] = torch.cuda.get_device_name(0)
            v["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
            v["cudnn"] = torch.backends.cudnn.version()
    except Exception as e:  # noqa: BLE001 - a broken torch is the finding
        v["torch_error"] = repr(e)
    from labkit.node import nvidia_smi, parse_nvidia_smi
    text = nvidia_smi()
    v["nvidia_smi"] = parse_nvidia_smi(text) if text else None
    print(text or "nvidia-smi: not found (no NVIDIA driver here)")
    print(json.dumps(v, indent=1))
    (out / "versions.json").write_text(json.dumps(v, indent=1))
    return v


def zero(out: Path, cpu: bool) -> int:
    """DeepSpeed ZeRO-0..3 + offload at one rank, checked with lab 4's
    explanation rule; writes ``zero.json``; exit 1 if any is unexplained."""
    from labkit.launch import launch
    from labkit.measure.zero.expected import expected_bytes
    model = ZERO_CPU if cpu else ZERO_GPU
    ranks = launch("labkit.runs.zero", 1, {
        "variants": ",".join(ZERO_VARIANTS), "steps": 3, "batch": 4,
        "bf16": not cpu, "reduce_bucket_size": 20_000 if cpu else 50_000_000,
        **model}, timeout=220, require_gpu=not cpu,
        run_dir=out / "zero_run")
    rec, rows, bad = ranks[0], [], 0
    for name, run in rec["runs"].items():
        exp = expected_bytes(run["config"], rec["param_numels"], 1,
                             rec["no_grad_input_numels"],
                             run["optimizer_class"], run["grad_accum_dtype"])
        for cat in ("params", "grads", "optimizer"):
            got = run["bytes_end_of_backward"][cat]
            e = exp[cat]
            ok = e["expected"] <= got <= e["expected"] + e["slack"]
            bad += not ok
            rows.append({"variant": name, "what": cat, "measured": got,
                         "expected": e["expected"], "slack": e["slack"],
                         "explained": ok,
                         "optimizer_class": run["optimizer_class"],
                         "peak": run["peak"]})
            print(f"{'ok ' if ok else 'BAD'} {name:22s} {cat:9s} measured "
                  f"{got:>14,} expected {e['expected']:>14,.0f} + "
                  f"{e['slack']:,}  ({run['optimizer_class']})")
    (out / "zero.json").write_text(json.dumps(
        {"device": rec["device"], "deepspeed": rec["deepspeed_version"],
         "rows": rows}, indent=1))
    return 1 if bad else 0


def checkpoint(out: Path, cpu: bool = False) -> int:
    """Kill-and-resume at one rank: the resumed losses equal the
    uninterrupted reference bit for bit (deterministic kernels)."""
    from labkit.checkpoint import checkpoint_root
    from labkit.launch import launch
    d = out / "checkpoint"
    ckpt = checkpoint_root("gpu_check")    # checkpoints stay under _build
    shutil.rmtree(ckpt, ignore_errors=True)
    res = launch("labkit.runs.checkpoint", 1, {
        "ckpt_dir": ckpt, "steps": 8, "every": 2, "kill_rank": 0,
        "kill_step": 5, "reference": True, "batch": 8, "dataset": 32,
        **(ZERO_CPU if cpu else {"layers": 4, "hidden": 512, "heads": 8,
                                 "vocab": 8192, "seq": 256})},
        timeout=170, max_restarts=1, require_gpu=not cpu, run_dir=d / "run",
        env={"LABKIT_DETERMINISTIC": "1"})
    run, ref = res[0]["run"], res[0]["reference"]
    log = [json.loads(x) for x in (d / "run" / "steps.jsonl")
           .read_text().splitlines()]
    kept = {r["step"]: r["loss"] for r in log
            if r["attempt"] == 1 or r["step"] < run["resumed_from"]}
    diff = max(abs(kept[s] - ref["losses"][str(s)]) for s in kept)
    print(f"attempt {run['attempt']}, resumed from step "
          f"{run['resumed_from']}; largest loss difference {diff:g}")
    (out / "checkpoint.json").write_text(json.dumps(
        {"run": run, "reference": ref, "largest_difference": diff},
        indent=1))
    return 0 if run["attempt"] == 1 and diff == 0.0 else 1
