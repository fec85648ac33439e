"""Preflight's nvcc line for lab 9's Gemini (issue 28, a "likely" item
confirmed from Colossal-AI's sources: tests/test_colossalai_jit.py).

HybridAdam's fused CUDA Adam is JIT-built on first use with CUDA_HOME's
nvcc, and Colossal-AI refuses an nvcc whose CUDA major differs from its
torch's (``check_system_pytorch_cuda_match``). Rehearsed on the CPU with
a recorded ``nvcc -V`` (``tests/nvcc/cuda_13.0.txt``: the CUDA 13.0
toolkit of the machine this was written on, which Gemini would refuse
against torch 2.5.1's CUDA 12.4) run through a stand-in ``bin/nvcc``."""
from __future__ import annotations

from pathlib import Path

import pytest

from labkit import preflight
from labkit.preflight import software as S

RECORDED = Path(__file__).parent / "nvcc" / "cuda_13.0.txt"
GPU8 = {"colossalai": {"plugins": ["torch_ddp"], "compare": ["gemini"]}}


def _cuda_home(tmp_path, recorded=RECORDED) -> Path:
    """A CUDA_HOME whose bin/nvcc prints the recorded ``nvcc -V``."""
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text(f"#!/bin/sh\ncat '{recorded}'\n")
    nvcc.chmod(0o755)
    return nvcc.parent.parent


def test_recorded_nvcc_release_is_read():
    assert S.nvcc_release(RECORDED.read_text()) == "13.0"
    assert S.nvcc_release("nvcc: no release here") is None


def test_a_cuda_13_nvcc_skips_lab_9_with_one_line_naming_what_to_install(
        tmp_path):
    home = _cuda_home(tmp_path)
    [c] = S.check_nvcc("gpu8", GPU8, env={"CUDA_HOME": str(home)},
                       torch_cuda="12.4")
    # only lab 9 needs it: that lab is skipped, the run goes on
    assert c.name == "nvcc" and c.status == "skip" and c.lab == "colossalai"
    assert "nvcc 13.0" in c.found and "refuses another major" in c.found
    assert "Gemini" in c.need and "CUDA 12" in c.need
    assert "\n" not in c.fix
    assert "cuda-toolkit-12-4" in c.fix and "CUDA_HOME=/usr/local/cuda-12.4" \
        in c.fix


def test_same_major_passes_and_another_minor_warns(tmp_path):
    env = {"CUDA_HOME": str(_cuda_home(tmp_path))}
    [ok] = S.check_nvcc("gpu8", GPU8, env=env, torch_cuda="13.0")
    assert ok.status == "ok" and "nvcc 13.0" in ok.found
    [warn] = S.check_nvcc("gpu1", GPU8, env=env, torch_cuda="13.2")
    assert warn.status == "warn" and "minor differs" in warn.found


def test_no_cuda_home_and_no_nvcc_skips_lab_9(tmp_path, monkeypatch):
    monkeypatch.setattr(S, "DEFAULT_HOME", str(tmp_path / "none"))
    [c] = S.check_nvcc("gpu8", GPU8, env={"PATH": str(tmp_path)},
                       torch_cuda="12.4")
    assert c.status == "skip" and "no CUDA_HOME and no nvcc" in c.found
    home = tmp_path / "cuda"          # CUDA_HOME set, nvcc missing
    home.mkdir()
    [c] = S.check_nvcc("gpu8", GPU8, env={"CUDA_HOME": str(home)},
                       torch_cuda="12.4")
    assert c.status == "skip" and "no nvcc at" in c.found


def test_nvcc_on_path_is_found_as_torch_finds_it(tmp_path, monkeypatch):
    """No CUDA_HOME: torch's cpp_extension takes nvcc's grandparent."""
    home = _cuda_home(tmp_path)
    [c] = S.check_nvcc("gpu8", GPU8, env={"PATH": str(home / "bin")},
                       torch_cuda="13.0")
    assert c.status == "ok" and str(home / "bin" / "nvcc") in c.found


def test_only_a_gpu_profile_with_gemini_asks():
    assert S.check_nvcc("cpu", GPU8) == []
    assert S.check_nvcc("gpu8", {"colossalai": {"plugins": ["torch_ddp"]}}) \
        == []
    for name in ("gpu8", "gpu1"):
        assert S.uses_gemini(preflight.load_profile(name))


def test_colossalai_torch_cuda_is_read_without_importing_it(tmp_path):
    assert S.cai_torch_cuda(tmp_path / "no-venv") == "12.4"   # the pin
    if S.CAI_VENV.is_dir():
        assert S.cai_torch_cuda() == "12.4"     # torch 2.5.1+cu124


def test_preflight_runs_the_nvcc_line(monkeypatch):
    for name in ("check_devices", "check_torch", "check_deepspeed",
                 "check_topology", "check_host", "check_toolchain"):
        monkeypatch.setattr(preflight, name, lambda *a, **k: [])
    monkeypatch.setattr(preflight, "check_toolchain", lambda: preflight.Check(
        "toolchain", "ok", "found"))
    monkeypatch.setattr(preflight, "check_nvcc", lambda name, profile: [
        preflight.Check("nvcc", "fail", "asked", name)])
    monkeypatch.setattr(preflight, "folder_checks", lambda name: [])
    monkeypatch.setattr(preflight, "probe", lambda name, profile: [
        preflight.Check("busbw probe", "ok", "ran")])
    checks = preflight.run("gpu8")
    # the compiler of one lab does not stop NCCL's bandwidth probe
    assert [(c.name, c.found) for c in checks] == [
        ("busbw probe", "ran"), ("toolchain", "found"), ("nvcc", "asked")]
