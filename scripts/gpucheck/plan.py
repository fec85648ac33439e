"""The steps of the GPU check: what runs, its estimate and its timeout.

    python scripts/gpu_check.py --dry      # prints this plan

Estimates are for one H100/H200-class GPU (not measurements); the whole
check runs under one deadline (:data:`BUDGET_S` unless ``--deadline``),
so the timeouts, which sum to more, never add up past it (runner.py).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ME = ROOT / "scripts" / "gpu_check.py"
BUDGET_S = 540          # 9 minutes on one GPU, all steps together

# The zero step: every variant lab 4 runs at one rank (NVMe needs a drive)
ZERO_VARIANTS = ("zero0", "zero1", "zero2", "zero3", "zero2_offload_opt",
                 "zero3_offload_opt", "zero3_offload_params")
ZERO_GPU = {"layers": 4, "hidden": 1024, "heads": 16, "vocab": 32768,
            "seq": 512}
ZERO_CPU = {"layers": 2, "hidden": 64, "heads": 4, "vocab": 256, "seq": 32}
# The MFU benchmark (scripts/benchmark_gpu.py): its wide configuration
# (8 layers x 4096) at batch 8, eager and compiled
BENCH = ("--config", "wide", "--batch", "8", "--steps", "10", "--warmup",
         "3")


@dataclass
class Step:
    name: str
    est_s: float            # expected seconds on one H100/H200
    timeout_s: float
    cmd: list[str]
    cpu_safe: bool = False  # --dry runs it (with dry_cmd if given)
    dry_cmd: list[str] | None = None
    env: dict = field(default_factory=dict)
    ok_exits: tuple = (0,)  # preflight: 0/1/2 are all findings, recorded


def _py(*args) -> list[str]:
    return [sys.executable, *map(str, args)]


def steps(out: Path) -> list[Step]:
    bench = ROOT / "scripts" / "benchmark_gpu.py"
    labs = out / "labs"
    me = ME
    return [
        Step("versions", 5, 60, _py(me, "--step", "versions", "--out", out),
             cpu_safe=True),
        Step("preflight_gpu1", 30, 120, _py("-m", "labkit", "preflight",
             "--profile", "gpu1", "--json"), cpu_safe=True,
             dry_cmd=_py("-m", "labkit", "preflight", "--profile", "gpu1",
                         "--json", "--no-probe"), ok_exits=(0, 1, 2)),
        Step("preflight_gpu8", 10, 60, _py("-m", "labkit", "preflight",
             "--profile", "gpu8", "--json", "--no-probe"), cpu_safe=True,
             ok_exits=(0, 1, 2)),
        Step("zero", 70, 240, _py(me, "--step", "zero", "--out", out),
             cpu_safe=True, dry_cmd=_py(me, "--step", "zero", "--out", out,
                                        "--cpu")),
        Step("lab_memory", 100, 240, _py(
            ROOT / "scripts" / "run_labs.py", "--profile", "gpu1", "--only",
            "memory", "--out", labs, "--skip-preflight")),
        Step("lab_profiling", 150, 300, _py(
            ROOT / "scripts" / "run_labs.py", "--profile", "gpu1", "--only",
            "profiling", "--out", labs, "--skip-preflight")),
        Step("checkpoint", 50, 180, _py(me, "--step", "checkpoint", "--out",
                                        out), cpu_safe=True,
             dry_cmd=_py(me, "--step", "checkpoint", "--out", out, "--cpu")),
        Step("benchmark", 30, 120, _py(bench, *BENCH, "--out",
                                       out / "benchmark.json")),
        Step("benchmark_compile", 90, 300, _py(
            bench, "--compile", *BENCH, "--out",
            out / "benchmark_compile.json")),
    ]


def plan_text(plan: list[Step], dry: bool, deadline_s: float) -> str:
    rows = [f"{'step':18s} {'est s':>6s} {'timeout':>8s}  runs"]
    for s in plan:
        runs = ("here (CPU)" if s.cpu_safe else "GPU only") if dry else "yes"
        rows.append(f"{s.name:18s} {s.est_s:6.0f} {s.timeout_s:8.0f}  {runs}")
    total = sum(s.est_s for s in plan)
    rows.append(f"{'total':18s} {total:6.0f}           (budget {BUDGET_S} s "
                "on one H100/H200-class GPU; estimates, not measurements)")
    rows.append(f"deadline {deadline_s:.0f} s for the whole check: a step "
                "that no longer fits is skipped, a running one is stopped")
    return "\n".join(rows)
