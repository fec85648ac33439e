"""The benchmark that measures the time budgets: its verdicts and its
command line (the budgets themselves are never asserted in a test)."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location(
    "benchmark", ROOT / "scripts" / "benchmark.py")
benchmark = importlib.util.module_from_spec(spec)
spec.loader.exec_module(benchmark)


def test_budgets_are_the_developers_guide_ones():
    assert benchmark.LAB_BUDGET_S == 90
    assert benchmark.MAKE_TEST_BUDGET_S == 20 * 60


def test_verdicts():
    r = benchmark.row("lab x", 90, 45.0)
    assert (r["ratio"], r["status"]) == (0.5, "ok")
    assert benchmark.row("lab x", 90, 99.0)["status"] == "OVER"
    assert benchmark.row("lab x", 90, 12.0, "FAILED")["status"] == "FAILED"
    r = benchmark.row("trace", 1, None, "skipped", "no traces")
    assert r["ratio"] is None and r["status"] == "skipped"


def test_command_line_writes_its_table(tmp_path):
    """Without labs it only times the trace reader (or skips it): quick.
    The report goes to _build/benchmark; the newest file is this run's."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "scripts/benchmark.py", "--no-labs",
                        "--cores", "1"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode in (0, 1), r.stderr
    assert "read + split" in r.stdout
    written = r.stdout.strip().splitlines()[-1].split()[-1]
    report = json.loads((ROOT / written).read_text())
    assert len(report["cpus"]) == 1
    assert report["rows"][0]["budget_s"] == benchmark.TRACE_TARGET_S


def test_a_compiling_lab_is_timed_cold_then_warm_on_one_empty_cache(
        monkeypatch):
    """Lab 12 (torch.compile): two runs on one fresh Inductor cache, the
    cold one reported beside the budget, the warm one held to it; the
    caller's cache folder is given back (run_lab faked: no lab runs)."""
    assert "fit" in benchmark.COMPILE_LABS
    seen = []

    def run_lab(name, nb, profile, params, out):
        cache = os.environ["TORCHINDUCTOR_CACHE_DIR"]
        seen.append((cache, sorted(os.listdir(cache))))
        Path(cache, "kernel.so").write_text("")   # what a run leaves
        return "ok", 100.0 if len(seen) == 1 else 50.0, ""

    monkeypatch.setattr(benchmark.run_labs, "run_lab", run_lab)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/mine")
    cold, warm = benchmark.bench_compile_lab("fit", Path("x.ipynb"), {})
    assert seen[0][0] == seen[1][0] != "/mine"
    assert seen[0][1] == [] and seen[1][1] == ["kernel.so"]
    assert cold["status"] == "reported" and "cold" in cold["what"]
    assert (warm["status"], warm["measured_s"]) == ("ok", 50.0)
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/mine"
