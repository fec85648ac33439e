"""scripts/benchmark_gpu.py: its GPU code path, run on CPU at a tiny size
(bf16 autocast, SDPA, the optimizer, torch.compile traced by Dynamo)."""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location(
    "benchmark_gpu", ROOT / "scripts" / "benchmark_gpu.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
TINY = ["--device", "cpu", "--layers", "2", "--hidden", "64", "--heads", "4",
        "--vocab", "256", "--seq", "32", "--batch", "4", "--steps", "2",
        "--warmup", "1"]


def test_cpu_smoke_run_reports_throughput_and_no_mfu(tmp_path):
    out = tmp_path / "mfu.json"
    extra = ["--compile", "--compile-backend", "eager"]
    assert bench.main(TINY + extra + ["--out", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["device"] == "cpu" and rec["bf16"] is True
    assert rec["tokens_per_s"] > 0 and rec["model_flops_per_step"] > 0
    assert rec["mfu"] is None and "no MFU" in rec["note"]
    assert rec["compile"] is True


def test_without_a_gpu_the_default_says_so(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="no CUDA GPU"):
        bench.main(["--steps", "1"])


def test_causal_attention_counted_at_half_and_peak_reset(tmp_path,
                                                        monkeypatch):
    """Issue 17, defect 9: the causal core is half of Eq. 3's attention
    term; the peak is reset before the timed steps."""
    from labkit import device as D
    from labkit.predict.flops import model_flops
    calls = []
    monkeypatch.setattr(D, "reset_peak", lambda dev: calls.append(dev))
    out = tmp_path / "mfu.json"
    assert bench.main(TINY + ["--out", str(out)]) == 0
    rec = json.loads(out.read_text())
    full = model_flops(4, 32, 2, 64, 256)
    assert rec["model_flops_full_attention"] == full
    assert rec["model_flops_per_step"] == full - 6 * 4 * 32 ** 2 * 2 * 64
    assert rec["achieved_tflops_per_gpu"] == pytest.approx(
        rec["model_flops_per_step"] / rec["step_s_median"] / 1e12)
    assert len(calls) == 1
