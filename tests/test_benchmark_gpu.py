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
    from labkit.predict.model.flops import model_flops
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


def test_bf16_weights_fp32_master_sdpa_backend_and_matmul_ceiling(tmp_path):
    """Issue 28 §4: bf16 parameters with an fp32 master copy (Adam steps
    the master), the SDPA backend that ran, and the bf16 matmul ceiling
    measured beside MFU ("fraction of achievable")."""
    out = tmp_path / "mfu.json"
    assert bench.main(TINY + ["--out", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["weights"].startswith("bf16, fp32 master")
    assert rec["loss_logits_dtype"] == "bf16"
    assert rec["sdpa_backend"] in set(bench.SDPA_OPS.values())
    assert rec["matmul_tflops"] > 0 and rec["matmul_size"] == 256
    assert rec["fraction_of_achievable"] == pytest.approx(
        rec["achieved_tflops_per_gpu"] / rec["matmul_tflops"])


def test_the_wide_config_at_batch_8_is_the_default():
    a = bench.parse_args([])
    assert (a.layers, a.hidden, a.heads, a.batch) == (8, 4096, 32, 8)
    a = bench.parse_args(["--config", "1b", "--layers", "4"])
    assert (a.layers, a.hidden) == (4, 2048)


def test_master_adam_steps_fp32_and_no_fp32_logits_exist():
    """One step: the bf16 weights equal the fp32 master cast down, the
    master moved; no fp32 tensor of the logits' size is ever made."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from labkit.nn.model import GPTConfig, batch, build
    c = GPTConfig(layers=1, hidden=32, heads=2, vocab=512, seq=16)
    model = build(c).to(torch.bfloat16)
    opt = bench.MasterAdam(model, 1e-2)
    before = [m.clone() for m in opt.master]
    x, y = batch(c, 2, step=0)
    logits_numel = 2 * c.seq * c.vocab

    class Fp32Logits(TorchDispatchMode):
        seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            r = func(*args, **(kwargs or {}))
            for t in (r if isinstance(r, (tuple, list)) else [r]):
                if isinstance(t, torch.Tensor) and \
                        t.dtype == torch.float32 and t.dim() and \
                        t.shape[-1] == c.vocab and \
                        t.numel() == logits_numel:
                    self.seen.append(str(func))
            return r

    with Fp32Logits():
        bench.train_step(model, opt, x, y, bench.bf16_loss)
    assert Fp32Logits.seen == []
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert all(m.dtype == torch.float32 for m in opt.master)
    assert any(not torch.equal(b, m) for b, m in zip(before, opt.master))
    for p, m in zip(opt.params, opt.master):
        assert torch.equal(p, m.to(torch.bfloat16))
