"""scripts/gpu_check.py --dry (what `make gpu-check DRY=1` runs): the plan
within the 9-minute budget, the CPU-safe steps run here, everything under
one folder; and scripts/gpu_wheels.py's list for a bare GPU machine."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load(name):
    spec = importlib.util.spec_from_file_location(
        name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod          # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


gc = _load("gpu_check")


def test_plan_fits_the_budget_and_every_step_has_a_timeout(tmp_path):
    plan = gc.steps(tmp_path)
    assert sum(s.est_s for s in plan) <= gc.BUDGET_S == 540
    assert all(0 < s.est_s <= s.timeout_s for s in plan)
    names = [s.name for s in plan]
    for must in ("versions", "preflight_gpu1", "preflight_gpu8", "zero",
                 "lab_memory", "lab_profiling", "checkpoint", "benchmark",
                 "benchmark_compile"):
        assert must in names
    lab1 = next(s for s in plan if s.name == "lab_memory").cmd
    assert lab1[-6:-2] == ["gpu1", "--only", "memory", "--out"] or \
        ["--profile", "gpu1", "--only", "memory"] == lab1[2:6]


def test_dry_run_prints_the_plan_and_runs_the_cpu_safe_steps(tmp_path):
    out = tmp_path / "gc"
    r = subprocess.run([sys.executable, str(ROOT / "scripts" /
                                            "gpu_check.py"), "--dry",
                        "--out", str(out), "--archive",
                        str(tmp_path / "gc.tar.gz")],
                       capture_output=True, text=True, timeout=600,
                       cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "total" in r.stdout and "GPU only" in r.stdout
    s = json.loads((out / "summary.json").read_text())
    assert s["dry"] and s["est_total_s"] <= 540
    status = {x["step"]: x["status"] for x in s["steps"]}
    assert status["versions"] == status["zero"] == "ok"
    assert status["checkpoint"] == "ok"          # kill, resume, bit for bit
    ck = json.loads((out / "checkpoint.json").read_text())
    assert ck["run"]["attempt"] == 1 and ck["largest_difference"] == 0.0
    assert status["preflight_gpu1"] == status["preflight_gpu8"] == "ok"
    assert status["lab_memory"] == status["benchmark"] == "planned"
    assert s["versions"]["torch"] and "nvidia_smi" in s["versions"]
    # lab 4's rule at one rank, every ZeRO stage and the offloads
    rows = json.loads((out / "zero.json").read_text())["rows"]
    assert {x["variant"] for x in rows} == set(gc.ZERO_VARIANTS)
    assert all(x["explained"] for x in rows)
    assert all((out / f"{n}.log").is_file() for n in status
               if status[n] == "ok")
    assert (tmp_path / "gc.tar.gz").stat().st_size > 0


def test_wheels_for_a_bare_gpu_machine_leave_torch_alone(tmp_path):
    gw = _load("gpu_wheels")
    need = gw.needed()
    for name in ("deepspeed", "papermill", "ipykernel", "nbformat"):
        assert name in need
    for name in ("torch", "numpy", "triton", "jupyterlab"):
        assert name not in need
    assert gc.install_wheels(tmp_path, wheels=tmp_path / "none") == {}
