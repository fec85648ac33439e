"""One prepared GPU check: the most GPU surface in <= 9 minutes on one GPU.

    make gpu-check                       # on a GPU machine
    make gpu-check DRY=1                 # anywhere: the plan, CPU-safe parts
    python scripts/gpu_check.py --out /tmp/gc --archive $OUT/gpu-check.tgz
    python scripts/gpu_check.py --dry --out /tmp/gc

Every step runs as its own process under its own timeout; its command,
output, exit status and seconds go to ``<out>/<step>.log`` and
``<out>/summary.json`` (default ``<out>``: ``_build/gpu-check/<stamp>/``).
A failing step does not stop the next. The steps, for one H100/H200-class
GPU (estimates in :data:`STEPS`; the plan's total is <= 540 s):

1. ``versions``: Python, torch, CUDA, NCCL, DeepSpeed, ... and
   ``nvidia-smi`` as the check ran them (``versions.json``);
2. ``preflight_gpu1`` / ``preflight_gpu8``: ``python -m labkit preflight``
   (gpu8 without the bus-bandwidth probe: one GPU cannot host 8 ranks);
3. ``zero``: DeepSpeed ZeRO-0..3 and CPU offload at one rank, bf16, a
   small GPT, each variant's bytes checked with lab 4's explanation rule
   (``labkit.measure.zero_expected.expected_bytes``);
4. ``lab_memory``: lab 1 through the runner (``--profile gpu1 --only
   memory``);
5. ``lab_profiling``: lab 7 on gpu1 (a profiled run, the doctor and HTA
   side by side);
6. ``checkpoint``: kill-and-resume at one rank, resumed losses against
   the uninterrupted reference, bit for bit (``LABKIT_DETERMINISTIC=1``);
7. ``benchmark`` / ``benchmark_compile``: ``scripts/benchmark_gpu.py``
   eager and with ``--compile``.

Not here (they need >= 2 GPUs): every lab's gpu8 profile, labs 2-6 and 9
on gpu1 (world sizes >= 2), lab 8's hang and reshard cells, the NCCL
busbw probe; see the README.

The machine's own torch is used as it is. Other packages it lacks travel
as wheels in ``.whl/`` (``make gpu-wheels`` downloads them here); when that
folder exists they are installed with ``pip --no-index --target
<out>/site`` and put on ``PYTHONPATH`` for every step (torch never: the
machine's build stays). ``--dry`` prints the plan and runs only the steps
marked CPU-safe, on the CPU (``zero`` and ``checkpoint`` at a tiny size,
fp32 on gloo).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET_S = 540          # 9 minutes on one GPU, all steps together
WHEELS = ROOT / ".whl"

# The zero step: every variant lab 4 runs at one rank (NVMe needs a drive)
ZERO_VARIANTS = ("zero0", "zero1", "zero2", "zero3", "zero2_offload_opt",
                 "zero3_offload_opt", "zero3_offload_params")
ZERO_GPU = {"layers": 4, "hidden": 1024, "heads": 16, "vocab": 32768,
            "seq": 512}
ZERO_CPU = {"layers": 2, "hidden": 64, "heads": 4, "vocab": 256, "seq": 32}


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
    me = Path(__file__).resolve()
    bench = ROOT / "scripts" / "benchmark_gpu.py"
    labs = out / "labs"
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
        Step("benchmark", 30, 120, _py(bench, "--steps", "10", "--warmup",
             "3", "--batch", "4", "--out", out / "benchmark.json")),
        Step("benchmark_compile", 90, 300, _py(
            bench, "--compile", "--steps", "10", "--warmup", "3", "--batch",
            "4", "--out", out / "benchmark_compile.json")),
    ]


def plan_text(plan: list[Step], dry: bool) -> str:
    rows = [f"{'step':18s} {'est s':>6s} {'timeout':>8s}  runs"]
    for s in plan:
        runs = ("here (CPU)" if s.cpu_safe else "GPU only") if dry else "yes"
        rows.append(f"{s.name:18s} {s.est_s:6.0f} {s.timeout_s:8.0f}  {runs}")
    total = sum(s.est_s for s in plan)
    rows.append(f"{'total':18s} {total:6.0f}           (budget {BUDGET_S} s "
                "on one H100/H200-class GPU; estimates, not measurements)")
    return "\n".join(rows)


# -- wheels: what the GPU machine lacks ---------------------------------------

def install_wheels(out: Path, wheels: Path = WHEELS) -> dict:
    """``pip install --no-index --no-deps --target <out>/site`` of
    ``.whl/*.whl`` (never torch: the machine's build is the one checked).
    Returns the environment additions for the steps."""
    found = sorted(p for p in wheels.glob("*.whl")
                   if not p.name.lower().startswith("torch-"))
    if not found:
        return {}
    site = out / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                    "--no-index", "--no-deps", "--no-compile",
                    "--no-cache-dir", "--upgrade", "--target", str(site),
                    *map(str, found)], check=True)
    return {"LABKIT_GPU_CHECK_SITE": str(site)}


def step_env(extra: dict) -> dict:
    env = {**os.environ, **extra}
    paths = [str(ROOT)]
    if extra.get("LABKIT_GPU_CHECK_SITE"):
        paths.append(extra["LABKIT_GPU_CHECK_SITE"])
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


# -- running ----------------------------------------------------------------

def run_step(s: Step, out: Path, env: dict, dry: bool) -> dict:
    cmd = s.dry_cmd if dry and s.dry_cmd else s.cmd
    log = out / f"{s.name}.log"
    t0 = time.perf_counter()
    status, rc = "ok", 0
    with open(log, "w") as f:
        f.write("$ " + " ".join(map(str, cmd)) + "\n")
        f.flush()
        try:
            p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT,
                               env={**env, **s.env}, cwd=ROOT,
                               timeout=s.timeout_s, start_new_session=True)
            rc = p.returncode
            status = "ok" if rc in s.ok_exits else "failed"
        except subprocess.TimeoutExpired:
            status, rc = "timeout", None
            f.write(f"\n[gpu_check] timed out after {s.timeout_s:.0f} s\n")
    secs = time.perf_counter() - t0
    tail = log.read_text(errors="replace").splitlines()[-8:]
    return {"step": s.name, "status": status, "exit": rc,
            "seconds": round(secs, 1), "est_s": s.est_s,
            "timeout_s": s.timeout_s, "log": log.name,
            "cmd": " ".join(map(str, cmd)), "tail": tail}


def run(out: Path, dry: bool, only: list[str] | None = None,
        archive: Path | None = None) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    plan = steps(out)
    if only:
        plan = [s for s in plan if s.name in only]
    print(plan_text(plan, dry), flush=True)
    env = step_env({} if dry else install_wheels(out))
    results = []
    for s in plan:
        if dry and not s.cpu_safe:
            results.append({"step": s.name, "status": "planned",
                            "est_s": s.est_s, "timeout_s": s.timeout_s})
            continue
        r = run_step(s, out, env, dry)
        results.append(r)
        print(f"{r['status']:8s} {s.name:18s} {r['seconds']:6.1f} s  "
              f"(est {s.est_s:.0f}, timeout {s.timeout_s:.0f})", flush=True)
    summary = {"dry": dry, "out": str(out),
               "est_total_s": sum(s.est_s for s in plan),
               "budget_s": BUDGET_S, "steps": results,
               "when": dt.datetime.now(dt.timezone.utc).isoformat(
                   timespec="seconds")}
    vfile = out / "versions.json"
    if vfile.is_file():
        summary["versions"] = json.loads(vfile.read_text())
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    if archive:
        archive.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(out, arcname=out.name,
                    filter=lambda ti: None if "/site" in ti.name else ti)
    return summary


# -- the steps that live here -------------------------------------------------

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
    from labkit.measure.zero_expected import expected_bytes
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dry", action="store_true",
                   help="print the plan; run only the CPU-safe steps")
    p.add_argument("--out", type=Path, default=None,
                   help="output folder (default _build/gpu-check/<stamp>)")
    p.add_argument("--only", action="append", default=[],
                   help="run only this step (repeatable)")
    p.add_argument("--archive", type=Path,
                   help="also write the output folder as this .tar.gz")
    p.add_argument("--step", help=argparse.SUPPRESS)   # one step, inside
    p.add_argument("--cpu", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    out = a.out or ROOT / "_build" / "gpu-check" / dt.datetime.now(
        dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    if a.step:
        out.mkdir(parents=True, exist_ok=True)
        fn = {"versions": lambda: versions(out) and 0,
              "zero": lambda: zero(out, a.cpu),
              "checkpoint": lambda: checkpoint(out, a.cpu)}[a.step]
        return fn() or 0
    known = {s.name for s in steps(out)}
    if set(a.only) - known:
        p.error(f"unknown step(s) {sorted(set(a.only) - known)}; known: "
                f"{sorted(known)}")
    summary = run(out, a.dry, a.only, a.archive)
    failed = [r["step"] for r in summary["steps"]
              if r["status"] in ("failed", "timeout")]
    print(f"=> {'FAILED: ' + ', '.join(failed) if failed else 'ok'} "
          f"({out})")
    return 1 if failed else 0


if __name__ == "__main__":
    if shutil.which("nvidia-smi") is None and "--dry" not in sys.argv \
            and "--step" not in sys.argv:
        print("note: no nvidia-smi on this machine; use --dry for the plan",
              file=sys.stderr)
    sys.exit(main())
