"""Preflight: one table, exit 0/1/2, a clear line for what would fail."""
import json
from pathlib import Path
import subprocess
import sys

import pytest

from labkit import preflight
from labkit.predict import labtime
from labkit.preflight import Check

ROOT = preflight.ROOT


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "labkit", "preflight", *args],
                          cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.distributed
def test_cpu_profile_passes_here_with_a_table():
    r = _cli("--profile", "cpu")
    assert r.returncode == 0, r.stdout + r.stderr
    for name in ("cpu cores", "torch", "deepspeed", "busbw probe",
                 "host ram", "disk"):
        assert name in r.stdout
    assert "gloo 2 ranks" in r.stdout and r.stdout.rstrip().endswith("=> OK")


def test_gpu8_without_gpus_exits_2_with_one_line_reason():
    r = _cli("--profile", "gpu8", "--json")
    assert r.returncode == 2, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["status"] == "fail"
    gpus = next(c for c in out["checks"] if c["name"] == "gpus")
    assert gpus["status"] == "fail" and "needs 8 CUDA GPUs" in gpus["fix"]
    probe = next(c for c in out["checks"] if c["name"] == "busbw probe")
    assert probe["found"] == "not run"         # nothing was launched
    assert out["reason"].startswith("the gpu8 profile needs 8 CUDA GPUs")


def test_unknown_profile_is_one_line_exit_2():
    r = _cli("--profile", "tpu64")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "unknown profile" in r.stderr


def test_needs_come_from_the_profile_not_a_list():
    prof = {"a": {"world_sizes": [2, 16]}, "b": {"tp_sizes": [4]},
            "c": {"model": {"layers": 2, "hidden": 64, "heads": 4,
                            "vocab": 256, "seq": 32}, "bf16": True}}
    assert preflight.ranks_needed(prof) == 16
    assert preflight.largest_model(prof)[:2] == ("c", 2 * 12 * 64 * 64 + (
        2 * 13 * 64) + (256 + 32) * 64 + 256 * 64 + 2 * 64)
    gpu8 = preflight.load_profile("gpu8")
    assert labtime.deepspeed_ops(gpu8) == []          # torch Adam offload
    assert labtime.deepspeed_ops(gpu8, True) == ["async_io", "cpu_adam"]
    assert labtime.deepspeed_ops(preflight.load_profile("cpu")) == []
    ram, disk = preflight.offload_bytes(gpu8)
    assert ram > 0 and disk == ram


def test_interconnect_is_read_from_nvidia_smi_topo():
    nv = "GPU0\tX\tNV18\nGPU1\tNV18\tX\n"
    pcie = "GPU0\tX\tPIX\nGPU1\tPIX\tX\n"
    assert preflight.interconnect(nv) == "NVLink"
    assert preflight.interconnect(pcie) == "PCIe"


def test_exit_status_is_the_worst_line():
    ok, warn = Check("a", "ok", "x"), Check("b", "warn", "y", "z")
    fail = Check("c", "fail", "0 GPUs", "8", "get GPUs")
    assert preflight.summary([ok])["exit"] == 0
    assert preflight.summary([ok, warn])["exit"] == 1
    s = preflight.summary([ok, warn, fail])
    assert s["exit"] == 2 and s["reason"] == "get GPUs"
    assert "get GPUs" in preflight.table([ok, fail])


def test_missing_nvme_ops_warn_and_block_no_lab(monkeypatch):
    """gpu8 without libaio: only lab 4's optional NVMe cell needs async_io
    and cpu_adam, so preflight warns instead of failing (issue 17, defect
    3: it failed, and run_labs exited 2 before any lab ran)."""
    from deepspeed.ops.op_builder.all_ops import ALL_OPS
    monkeypatch.setattr(ALL_OPS["async_io"], "is_compatible",
                        lambda verbose=False: False)
    checks = preflight.check_deepspeed(preflight.load_profile("gpu8"))
    assert [c.status for c in checks] == ["warn"]
    assert "async_io NOT compatible" in checks[0].found
    assert "NVMe" in checks[0].need and "libaio" in checks[0].fix
    nvme_lab = {"zero": {"variants": ["zero3_nvme"]}}
    assert preflight.check_deepspeed(nvme_lab)[0].status == "fail"


def test_zero_gpus_names_the_driver_torch_mismatch(monkeypatch):
    """Issue 17, defect 8: a CUDA build newer than the driver sees no GPU;
    preflight names driver and build instead of "0 GPUs"."""
    import torch
    smi = (Path(__file__).parent / "nvidia_smi" /
           "h100x8_driver535.txt").read_text()
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    c = preflight.no_gpus("gpu8", 8, smi)
    assert c.status == "fail" and "535.104.05" in c.fix
    assert "CUDA 13.0" in c.fix and "8 GPU(s)" in c.found
    monkeypatch.setattr(torch.version, "cuda", None)      # a CPU build
    assert "CPU build" in preflight.no_gpus("gpu8", 8, smi).fix
    assert preflight.no_gpus("gpu8", 8, "").found == "0 CUDA GPUs"


# -- GPU memory, lab by lab (issue 28, defect 1) ---------------------------
H100 = 81559 * 2**20     # bytes torch reports for an H100 80GB HBM3
T4 = 15360 * 2**20


def _lines(profile, gpus, gpu_bytes):
    return {c.name: c for c in preflight.gpu_lines(
        preflight.load_profile(profile), gpus, "GPU", gpu_bytes)}


def test_gpu8_on_80gb_passes_with_lab_12s_oom_expected():
    """The old check took lab 12's 6.7B DDP states (107.6 GB) as the need
    and stopped gpu8 on 80 GB GPUs; each lab's own need fits, and the
    oversized DDP is the OOM lab 12 expects."""
    c = _lines("gpu8", 8, H100)
    assert c["gpu memory"].status == "ok", c["gpu memory"]
    assert "lab fit" in c["gpu memory"].need   # the planner's choice
    assert c["expected OOM"].status == "ok"
    assert "over budget: ddp" in c["expected OOM"].found
    # lab 12's runs, each with the runtime floor and the margin left
    assert c["gpu headroom"].status == "ok" and "+ floor" in \
        c["gpu headroom"].found


def test_gpu1_uses_fit_to_gpu_and_skips_what_does_not_run():
    c = _lines("gpu1", 1, T4)   # a 16 GB T4: lab 1 trims its layers
    assert c["gpu memory"].status == "ok", c["gpu memory"]
    assert "fit_to_gpu" in c["gpu memory"].need
    assert "expected OOM" not in c    # lab 12 needs 2 GPUs: skipped
    two = _lines("gpu1", 2, T4)
    assert two["gpu memory"].status == "ok" and two["expected OOM"]


def test_a_lab_that_does_not_fit_fails_naming_it():
    c = _lines("gpu8", 8, 16e9)   # 1.4B DDP (22 GB) on 16 GB GPUs
    assert c["gpu memory"].status == "fail"
    assert "memory" in c["gpu memory"].fix and "lab memory" in \
        c["gpu memory"].need


def test_old_rule_reintroduced_would_fail_gpu8():
    """The mutation: the largest model's DDP states against 0.9 x 80 GB."""
    from labkit.predict.memory import ledger
    lab, psi, bf16 = preflight.largest_model(preflight.load_profile("gpu8"))
    assert lab == "fit"
    assert ledger(psi, 1, "ddp", "mixed").gpu_total > 0.9 * H100
