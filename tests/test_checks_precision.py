"""Lab 14's parameter check: one clear line per bad parameter."""
from __future__ import annotations

import pytest

from labkit.checks import precision

GOOD = dict(profile="cpu", world_size=4, ks=[1, 4], formats=["bf16"],
            fp8="emulated", preset="llama-tiny", hidden=256, ffn=768,
            micro_batch=4, block=128)


def test_good_parameters_pass():
    assert precision(**GOOD) is False


@pytest.mark.parametrize("change,message", [
    ({"formats": ["bf16", "fp12"]}, "unknown precision 'fp12'"),
    ({"fp8": "int8"}, "unknown fp8 mode 'int8'"),
    ({"ks": [0, 4]}, r"ks\[0\]=0: must be an integer in \[1,"),
    ({"ks": [-2]}, r"ks\[0\]=-2: must be an integer in \[1,"),
    ({"world_size": 3}, "world_size must be 2 or 4"),
    ({"hidden": 200}, "multiple of the FP8 block 128"),
    ({"preset": "gpt-huge"}, "gpt-huge"),
    ({"profile": "tpu"}, "unknown profile"),
])
def test_bad_parameters_are_one_line(change, message):
    with pytest.raises(ValueError, match=message) as e:
        precision(**{**GOOD, **change})
    assert "\n" not in str(e.value)


def test_fp8_gemm_where_it_cannot_run_says_why_and_what_runs(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError) as e:
        precision(**{**GOOD, "fp8": "scaled_mm"})
    msg = str(e.value)
    assert "no CUDA GPU" in msg and "fp8='emulated'" in msg
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "A100")
    with pytest.raises(ValueError, match="sm_80: FP8 tensor cores start"):
        precision(**{**GOOD, "fp8": "scaled_mm"})


def test_ranks_backend_one_line_and_gloo_on_one_gpu(monkeypatch):
    with pytest.raises(ValueError, match="unknown ranks_backend 'mpi'"):
        precision(**{**GOOD, "ranks_backend": "mpi"})
    from labkit import launch
    monkeypatch.setattr("labkit.launch.request.cuda_device_count",
                        lambda: 1)
    gpu1 = {**GOOD, "profile": "gpu1"}
    with pytest.raises(ValueError, match="needs 4 CUDA GPUs, 1 are"):
        precision(**gpu1)                  # nccl: one GPU per rank
    with pytest.raises(ValueError, match="nccl needs one GPU per rank"):
        precision(**{**GOOD, "ranks_backend": "nccl"})
    assert precision(**{**gpu1, "ranks_backend": "gloo"}) is True
    assert launch.pick_backend(4, "gloo") == "gloo"


def test_gloo_ranks_need_one_gpu():
    from labkit.preflight.check import lab_ranks
    assert lab_ranks({"world_size": 4}) == 4
    assert lab_ranks({"world_size": 4, "ranks_backend": "gloo"}) == 1
