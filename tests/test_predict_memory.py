"""The memory ledger against the 70B example and the ZeRO paper's Table 1."""
import json
import subprocess
import sys

import pytest

from labkit.predict.memory import (GB, activation_bytes_per_layer,
                                   bytes_per_param, gpt_params, ledger,
                                   smallest_gpus, verdict)

PSI_70B = 70e9


def test_bytes_per_param():
    assert bytes_per_param("mixed", "adam").total == 16      # 2 + 2 + 12
    assert bytes_per_param("mixed", "adam").optimizer == 12  # ZeRO's K
    assert bytes_per_param("fp32", "adam").total == 16       # 4 + 4 + 8
    assert bytes_per_param("mixed", "adam", fp32_grads=True).total == 18
    assert bytes_per_param("fp32", "sgd").total == 8
    assert bytes_per_param("fp32", "sgd_momentum").total == 12
    assert bytes_per_param("mixed", "sgd").total == 8        # 2 + 2 + master


def test_70b_ddp_does_not_fit_a_node():
    ddp = ledger(PSI_70B, 8, "ddp")
    assert ddp.gpu_total == pytest.approx(1120 * GB)   # 16 Psi on every GPU
    assert ddp.gpu_total > 8 * 80 * GB                 # > the node's 640 GB


def test_70b_zero3_and_the_ways_out():
    z3 = ledger(PSI_70B, 8, "zero3")
    assert z3.gpu_total == pytest.approx(140 * GB)     # 1120 / 8
    assert ledger(PSI_70B, 16, "zero3").gpu_total == pytest.approx(70 * GB)
    assert smallest_gpus(PSI_70B, 80 * GB, "zero3") == 14  # 1120/14 = 80
    v = verdict(PSI_70B, 8, 80 * GB, "zero3")
    assert not v["fits"] and v["smallest_nodes"] == 2   # 16 GPUs
    assert v["offload_that_fits"] == "optimizer"
    off = ledger(PSI_70B, 8, "zero3", offload="optimizer")
    assert off.gpu_total == pytest.approx(17.5 * GB)    # 2 Psi / N_d
    assert off.cpu_total == pytest.approx(122.5 * GB)   # 14 Psi / N_d
    assert ledger(PSI_70B, 8, "zero3", offload="params").gpu_total == 0


# Rajbhandari et al. 2020, Table 1: per-device GB for P_os, P_os+g,
# P_os+g+p (K = 12) at several data-parallel degrees.
TABLE1 = [  # (params, N_d, P_os, P_os+g, P_os+g+p)
    (7.5e9, 1, 120, 120, 120),
    (7.5e9, 4, 52.5, 41.3, 30),
    (7.5e9, 16, 35.6, 21.6, 7.5),
    (7.5e9, 64, 31.4, 16.6, 1.88),
    (128e9, 64, 536, 284, 32),
    (1e12, 1024, None, None, 15.6),  # the paper's headline: 1T on 1024 GPUs
]


@pytest.mark.parametrize("psi,n,os_,osg,osgp", TABLE1)
def test_zero_paper_table1(psi, n, os_, osg, osgp):
    for strategy, want in (("zero1", os_), ("zero2", osg), ("zero3", osgp)):
        if want is None:
            continue
        got = ledger(psi, n, strategy).gpu_total / GB
        assert got == pytest.approx(want, rel=5e-3), strategy


def test_fsdp_names():
    psi = 1e9
    assert ledger(psi, 8, "full_shard").gpu_total == ledger(psi, 8, "zero3").gpu_total
    assert ledger(psi, 8, "no_shard").gpu_total == ledger(psi, 8, "ddp").gpu_total
    sgo = ledger(psi, 8, "shard_grad_op")
    assert sgo.transient_gpu == 2 * psi                 # unsharded bf16 weights
    hy = ledger(psi, 8, "hybrid_shard", shard_group=4)  # shard in 4, replicate 2x
    assert hy.gpu_total == pytest.approx(16 * psi / 4)


@pytest.mark.parametrize("kw", [
    dict(params=-1, gpus=8), dict(params=1e9, gpus=0),
    dict(params=10, gpus=11), dict(params=1e9, gpus=8, strategy="zero4"),
    dict(params=1e9, gpus=8, strategy="ddp", offload="optimizer"),
    dict(params=1e9, gpus=8, strategy="zero2", offload="params"),
    dict(params=1e9, gpus=6, strategy="hybrid_shard", shard_group=4),
])
def test_bad_input(kw):
    with pytest.raises(ValueError):
        ledger(**kw)


def test_gpt_params_megatron_table1():
    # Narayanan et al. 2021, Table 1 (V = 51200, s = 2048, tied embeddings):
    # 1.7B: h 2304, l 24; 175B: h 12288, l 96; 1T: h 25600, l 128.
    for h, l, a, want in ((2304, 24, 24, 1.7e9), (12288, 96, 96, 175e9),
                          (25600, 128, 160, 1.0e12)):
        got = gpt_params(l, h, a, 51200, 2048, tied=True, final_norm=False)
        assert got == pytest.approx(want, rel=0.03)


def test_activations_korthikanti_table2():
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    sbh = s * b * h
    assert activation_bytes_per_layer(s, b, h, a) == sbh * (34 + 5 * a * s / h)
    assert activation_bytes_per_layer(s, b, h, a, tp=t) == pytest.approx(
        sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    assert activation_bytes_per_layer(s, b, h, a, tp=t, sequence_parallel=True,
                                      recompute="selective") == sbh * 34 / t
    assert activation_bytes_per_layer(s, b, h, a, recompute="full") == 2 * sbh


def test_activations_model_fused_attention_drops_the_scores():
    # Chapter 1's 70B shape: 34 s b h per layer with SDPA/FlashAttention
    # (about 91 GB for 80 layers), the paper's 34 + 5as/h without.
    from labkit.predict.memory import activation_bytes_model
    L, s, h, a = 80, 4096, 8192, 64
    assert activation_bytes_model(L, s, 1, h, a) == L * 34 * s * h
    assert round(activation_bytes_model(L, s, 1, h, a) / GB) == 91
    assert activation_bytes_model(L, s, 1, h, a, fused_attention=False) == (
        L * s * h * (34 + 5 * a * s / h))
    assert activation_bytes_model(L, s, 2, h, a, recompute="full") == (
        L * 2 * s * 2 * h)
    with pytest.raises(ValueError, match="layers"):
        activation_bytes_model(0, s, 1, h, a)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "labkit", "memory", *args],
                          capture_output=True, text=True)


def test_cli_json_and_table():
    r = _cli("--params", "70e9", "--gpus", "8", "--gpu-mem", "80",
             "--stage", "3", "--offload", "optimizer", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["ledger"]["gpu_total"] == pytest.approx(17.5e9)
    assert out["verdict"]["fits"] is True
    r = _cli("--params", "70e9", "--stage", "3")
    assert r.returncode == 0 and "140.00" in r.stdout and "14" in r.stdout


@pytest.mark.parametrize("args", [("--params", "70e9", "--stage", "4"),
                                  ("--params", "-5"),
                                  ("--params", "10", "--gpus", "11"),
                                  ("--params", "1e9", "--offload", "nvme")])
def test_cli_bad_input_exit_2(args):
    r = _cli(*args)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_layers_that_fit_one_gpu():
    from labkit.predict.memory import (activation_bytes_per_layer,
                                       gpt_params, layers_that_fit)
    shape = dict(hidden=2048, heads=16, vocab=50304, seq=1024)
    gb = 1e9
    # ~1.4B parameters: 22 GB of model states fit 80 GB, not 16 GB
    assert layers_that_fit(80 * gb, 24, micro_batch=8, **shape) == 24
    n = layers_that_fit(16 * gb, 24, micro_batch=8, **shape)
    assert 0 < n < 24
    from labkit.predict.memory.job import on_gpu
    act = activation_bytes_per_layer(1024, 8, 2048, 16)
    logits = 8 * 1024 * 8 * 50304     # fp32 logits and their gradient
    fits = [on_gpu(16 * gpt_params(k, 2048, 16, 50304, 1024) + k * act
                   + logits, 1, 16 * gb)["fits"] for k in (n, n + 1)]
    assert fits == [True, False]   # the floor and the margin judge it
    assert layers_that_fit(1 * gb, 24, micro_batch=8, **shape) == 0


def test_memory_cli_reads_a_config():
    import json as _json
    import subprocess
    import sys
    from pathlib import Path
    cfg = Path(__file__).parent / "data" / "hf_configs" / "llama2-70b.json"
    r = subprocess.run([sys.executable, "-m", "labkit", "memory",
                        "--hf-config", str(cfg), "--gpus", "8", "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    led = _json.loads(r.stdout)["ledger"]
    assert led["params_gpu"] * 8 == 2 * 68_976_648_192
    r = subprocess.run([sys.executable, "-m", "labkit", "memory",
                        "--gpus", "8"], capture_output=True, text=True)
    assert r.returncode == 2 and "--hf-config" in r.stderr
