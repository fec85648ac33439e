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
