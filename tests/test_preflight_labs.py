"""Preflight judges lab by lab: what one lab lacks skips that lab, or
sends it to its fallback, and the run goes on (issue 47).

The node: ``tests/nvidia_smi/a100x8_driver580.txt``, eight A100-SXM4-80GB
under driver 580 (CUDA 13.0), built from the recorded two-A100 table
(``a100x2_driver565.txt``) with driver 580's header; its nvcc is the
recorded CUDA 13.0 ``nvcc -V`` (``tests/nvcc/cuda_13.0.txt``), which
Colossal-AI refuses against its torch's CUDA 12.4."""
from __future__ import annotations

from pathlib import Path

import pytest

from labkit import preflight
from labkit.preflight import software as S
from labkit.preflight.gpu import capability, check_capability

HERE = Path(__file__).parent
A100X8 = str(HERE / "nvidia_smi" / "a100x8_driver580.txt")
NVCC13 = HERE / "nvcc" / "cuda_13.0.txt"


@pytest.fixture
def cuda13(tmp_path, monkeypatch):
    """CUDA_HOME whose bin/nvcc prints the recorded CUDA 13.0 banner."""
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text(f"#!/bin/sh\ncat '{NVCC13}'\n")
    nvcc.chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(nvcc.parent.parent))
    monkeypatch.setattr(S, "cai_torch_cuda", lambda venv=None: "12.4")


def _by_name(checks):
    return {c.name: c for c in checks}


def test_gpu8_on_a100s_with_cuda13_skips_lab_9_and_emulates_fp8(cuda13):
    checks = preflight.rehearsed_run("gpu8", A100X8)
    c = _by_name(checks)
    assert "8 x NVIDIA A100-SXM4-80GB" in c["node"].found
    assert c["nvcc"].status == "skip" and c["nvcc"].lab == "colossalai"
    cap = c["compute capability"]
    assert cap.status == "warn" and "sm_80" in cap.found
    assert cap.lab == "precision" and cap.fallback == {"fp8": "emulated"}
    s = preflight.summary(checks)
    assert s["exit"] == 1                       # never refused
    assert list(s["skip"]) == ["colossalai"]
    assert "cuda-toolkit-12-4" in s["skip"]["colossalai"]
    assert s["fallback"] == {"precision": {"fp8": "emulated"}}
    # the rest: ok (DeepSpeed's optional NVMe op may warn on its own)
    rest = [x for x in checks if x.status != "ok" and x.name not in
            ("nvcc", "compute capability", "deepspeed ops")]
    assert rest == []


def test_gpu1_is_never_refused_for_lab_9(cuda13):
    s = preflight.summary(preflight.rehearsed_run("gpu1", "t4"))
    assert s["exit"] < 2 and "colossalai" in s["skip"]
    assert s["fallback"] == {"precision": {"fp8": "emulated"}}


def test_compute_capability_by_name_and_fp8():
    assert capability("NVIDIA H100 80GB HBM3") == (9, 0)
    assert capability("NVIDIA L4") == (8, 9)
    assert capability("NVIDIA A100-SXM4-80GB") == (8, 0)
    assert capability("Tesla T4") == (7, 5)
    assert capability("a GPU nobody listed") is None
    gpu8 = preflight.load_profile("gpu8")
    [ok] = check_capability(gpu8, "NVIDIA H200", None)
    assert ok.status == "ok" and ok.fallback is None
    [real] = check_capability(gpu8, "unnamed", (8, 6))
    assert real.fallback == {"fp8": "emulated"} and "sm_86" in real.found
    # a profile that asks no real FP8: any capability is fine
    [any_] = check_capability({"precision": {"fp8": "emulated"}}, "T4",
                              (7, 5))
    assert any_.status == "ok"


def test_host_ram_and_disk_are_judged_per_lab(monkeypatch):
    gpu8 = preflight.load_profile("gpu8")
    ram = preflight.host_needs(gpu8)
    assert set(ram) == {"zero", "fit"}
    disk = preflight.disk_needs(gpu8)
    assert set(disk) == {"zero", "checkpoint"}
    # 0.25B parameters, 12 B each, 20 steps every 5, DeepSpeed too: 8 saves
    assert disk["checkpoint"][1].startswith("8 checkpoints")
    # lab 12 builds on meta: each rank's process, no model (24 GB a node,
    # not 215 GB); lab 4's offloaded states are a little less
    assert ram["fit"][0] < 64e9 and "meta" in ram["fit"][1]
    assert ram["zero"][0] < ram["fit"][0]
    monkeypatch.setattr(preflight, "_free_ram",
                        lambda: (ram["zero"][0] + ram["fit"][0]) / 2)
    checks = preflight.check_host(gpu8)
    skips = [c for c in checks if c.status == "skip"]
    # the lab whose need is above the RAM is skipped, not the run
    assert [(c.name, c.lab) for c in skips if c.name == "host ram"] == [
        ("host ram", "fit")]
    s = preflight.summary(checks)
    assert s["exit"] == 1 and "fit" in s["skip"]
    # a rehearsal states the needs and judges nothing of this machine
    assert all(c.status == "ok" for c in preflight.check_host(gpu8, True))


def test_the_command_rehearses_a_described_node(cuda13, capsys):
    class A:
        profile, json, no_probe, rehearse = "gpu8", False, True, A100X8
    assert preflight.main(A) == 1
    out = capsys.readouterr().out
    assert "SKIP" in out and "lab colossalai:" in out
    assert "compute capability" in out and "fp8: emulated" in out
