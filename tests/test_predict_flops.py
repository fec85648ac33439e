"""FLOPs, MFU and training time against Narayanan et al. 2021 and PaLM."""
import json
import subprocess
import sys

import pytest

from labkit.predict.model.flops import (PEAKS, hardware_flops, matmul_params,
                                        megatron_params, model_flops,
                                        palm_flops_per_token, peak_tflops,
                                        report, training_days)
from labkit.predict.model import flops as FL
from labkit.predict.memory import gpt_params

V, S = 51200, 2048   # vocabulary and sequence of every model in Table 1

# Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on
# GPU Clusters Using Megatron-LM", SC'21), Table 1: parameters (billions),
# heads, hidden, layers, tensor-parallel, pipeline-parallel, GPUs, batch,
# achieved TFLOP/s per GPU, % of the A100's peak, aggregate PFLOP/s.
TABLE1 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 44, 4.4),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 44, 8.8),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 46, 18.2),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 43, 34.6),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 44, 70.8),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 45, 143.8),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 47, 227.1),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 50, 297.4),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 52, 410.2),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 52, 502.0),
]


@pytest.mark.parametrize("row", TABLE1, ids=lambda r: f"{r[0]}B")
def test_table1_parameter_count_from_shape(row):
    billions, heads, h, layers = row[:4]
    # Eq. 2, rounded to one decimal as the table prints it
    assert round(megatron_params(layers, h, V, S) / 1e9, 1) == billions
    assert megatron_params(layers, h, V, S) == gpt_params(
        layers, h, heads, V, S, tied=True, final_norm=False)


@pytest.mark.parametrize("row", TABLE1, ids=lambda r: f"{r[0]}B")
def test_table1_aggregate_is_per_gpu_times_gpus(row):
    _, heads, h, layers, t, p, gpus, batch, tflops, pct, agg = row
    assert t * p <= gpus and gpus % (t * p) == 0   # whole DP replicas
    r = report(layers, h, heads, S, V, batch, gpus=gpus,
               tflops_per_gpu=tflops, peak="a100", recompute="full",
               tied=True)
    # per-GPU figures are rounded to 1 TFLOP/s: within 0.5 / 135
    assert r.aggregate_pflops == pytest.approx(agg, rel=0.004)
    assert r.hfu * 100 == pytest.approx(pct, abs=0.6)  # % of 312 TFLOP/s
    # the paper counts the recomputed forward: MFU is about 3/4 of it (the
    # output layer is not recomputed, so a little more)
    assert 0.75 < r.mfu / r.hfu < 0.77


def test_training_time_eq4():
    # Narayanan et al. 2021, Sec. 5.1: GPT-3 (175B, 300B tokens) on 1024
    # A100s at 140 TFLOP/s takes 34 days; 1T (450B tokens) on 3072 GPUs at
    # 163 TFLOP/s about 84 days.
    assert training_days(300e9, 175e9, 1024, 140) == pytest.approx(34, abs=0.5)
    assert training_days(450e9, 1008e9, 3072, 163) == pytest.approx(84,
                                                                    abs=0.5)


def test_model_flops_equal_palm_definition():
    for (b, s, l, h, a, v) in [(8, 32, 2, 64, 4, 256),
                               (1536, 2048, 96, 12288, 96, 51200)]:
        n = matmul_params(l, h, v)
        palm = palm_flops_per_token(n, l, a, h // a, s) * b * s
        assert model_flops(b, s, l, h, v) == pytest.approx(palm, rel=1e-12)


def test_hardware_flops_add_the_recomputed_passes():
    b, s, l, h, v = 4, 2048, 24, 2304, V
    one_forward = 24 * b * s * l * h * h * (1 + s / (6 * h))  # no logits
    assert hardware_flops(b, s, l, h, v, "full") - model_flops(
        b, s, l, h, v) == pytest.approx(one_forward, rel=1e-12)
    assert hardware_flops(b, s, l, h, v, "selective") - model_flops(
        b, s, l, h, v) == pytest.approx(4 * b * s * s * h * l, rel=1e-12)
    assert hardware_flops(b, s, l, h, v, "none") == model_flops(b, s, l, h, v)


def test_peaks():
    assert peak_tflops("a100") == 312
    assert peak_tflops("h100") == peak_tflops("h200") == pytest.approx(
        989.4)
    assert set(PEAKS) >= {"a100", "h100", "h200"}
    with pytest.raises(ValueError):
        peak_tflops("tpu")


def test_report_from_iteration_time():
    r = report(2, 64, 4, 32, 256, 8, gpus=2, iteration_seconds=0.5,
               peak="h100")
    assert r.model_tflops_per_gpu == pytest.approx(
        model_flops(8, 32, 2, 64, 256) / 2 / 0.5 / 1e12)
    assert r.mfu == pytest.approx(r.model_tflops_per_gpu / 989.4)
    with pytest.raises(ValueError):
        report(2, 64, 4, 32, 256, 8, tflops_per_gpu=1, iteration_seconds=1)
    with pytest.raises(ValueError):
        report(2, 64, 5, 32, 256, 8)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "labkit", "flops", *args],
                          capture_output=True, text=True)


def test_cli_json_and_errors():
    r = _cli("--layers", "128", "--hidden", "25600", "--heads", "160",
             "--seq", "2048", "--vocab", "51200", "--batch", "3072",
             "--gpus", "3072", "--tflops-per-gpu", "163", "--peak", "a100",
             "--recompute", "full", "--tied", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["aggregate_pflops"] == pytest.approx(502.0, rel=0.004)
    assert 0.38 < d["mfu"] < 0.40 and 0.52 < d["hfu"] < 0.53
    bad = _cli("--layers", "-1", "--hidden", "64", "--heads", "4", "--seq",
               "8", "--vocab", "8", "--batch", "1")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("name, preset", [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA H100 NVL", None), ("NVIDIA H200", "h200"),
    ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA A100-PCIE-40GB", "a100"),
    ("NVIDIA L4", "l4"), ("Tesla T4", "t4"),
    ("NVIDIA GeForce RTX 4090", None), ("NVIDIA GH200 480GB", None)])
def test_gpu_preset_from_the_device_name(name, preset):
    """The PCIe H100 is not the SXM one (756 vs 989 TFLOP/s, no NVLink)."""
    assert FL.gpu_preset(name) == preset
    if preset:
        assert FL.peak_tflops(preset) > 0 and preset in FL.GPU_LINKS


def test_arch_flops_is_the_gpt_formula_for_a_gpt_preset():
    from labkit import arch
    from labkit.predict.model.flops import arch_flops, model_flops
    a = arch.preset("gpt-175b")
    for rc in ("none", "selective", "full"):
        f = arch_flops(a, 8, 2048, rc)
        assert f["hardware_flops"] == pytest.approx(
            hardware_flops(8, 2048, 96, 12288, 51200, rc), rel=1e-12)
    assert f["model_flops"] == pytest.approx(
        model_flops(8, 2048, 96, 12288, 51200), rel=1e-12)


def test_gqa_and_swiglu_flops_per_token():
    from labkit import arch
    from labkit.predict.model.flops import arch_flops
    a = arch.preset("llama3-8b")
    h, kv, f, L, V, s = 4096, 1024, 14336, 32, 128256, 8192
    n = L * (2 * h * h + 2 * h * kv + 3 * h * f) + V * h
    got = arch_flops(a, 1, s)["model_flops"] / s
    assert got == 6 * n + 12 * L * 32 * 128 * s
    mha = arch_flops(a.with_(kv_heads=0), 1, s)["model_flops"] / s
    assert mha - got == 6 * L * 2 * h * (h - kv)


def test_flops_cli_reads_a_config():
    import json as _json
    import subprocess
    import sys
    from pathlib import Path
    cfg = Path(__file__).parent / "data" / "hf_configs" / "llama3-8b.json"
    r = subprocess.run([sys.executable, "-m", "labkit", "flops",
                        "--hf-config", str(cfg), "--seq", "8192",
                        "--batch", "1", "--json"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert _json.loads(r.stdout)["params"] == 8_030_261_248
    r = subprocess.run([sys.executable, "-m", "labkit", "flops", "--seq",
                        "8", "--batch", "1"], capture_output=True, text=True)
    assert r.returncode == 2 and "--hf-config" in r.stderr


def test_flops_cli_labels_a_config_by_its_record_not_the_gpt_form():
    from pathlib import Path
    cfg = Path(__file__).parent / "data" / "hf_configs" / "llama3-8b.json"
    r = _cli("--hf-config", str(cfg), "--seq", "8192", "--batch", "1")
    assert r.returncode == 0, r.stderr
    assert "72Bslh" not in r.stdout and "flops_arch" in r.stdout
    r = _cli("--layers", "2", "--hidden", "64", "--heads", "4", "--seq",
             "16", "--vocab", "100", "--batch", "1")
    assert "72Bslh^2" in r.stdout
