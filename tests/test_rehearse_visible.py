"""Lab 14 on one GPU, rehearsed (issue 47): its four gloo ranks, shown
one visible GPU as a one-GPU node's CUDA runtime would show it
(:mod:`labkit.rehearse.node`), never touch CUDA -- the launcher hides
the GPU from gloo ranks. Without that (``CUDA_VISIBLE_DEVICES`` left at
the GPU), FSDP2's default mesh and DeepSpeed's accelerator claim
``set_device(LOCAL_RANK)`` and the launch fails, as on the node."""
import pytest

from labkit.launch import LaunchError, launch
from labkit.rehearse.node import ENV, visible

# lab 14's launch as the gpu1 profile makes it (ranks at the CPU
# profile's sizes), its FSDP2 and DeepSpeed parts only
ARGS = {"preset": "llama-tiny", "hidden": 256, "ffn": 768,
        "micro_batch": 4, "ks": [1, 4], "block": 128, "scaler_steps": 2,
        "init_scale": 4194304.0, "growth_interval": 2,
        "parts": "dist,deepspeed"}


def test_the_runtime_rule():
    assert visible(1, {}) == 1
    assert visible(1, {"CUDA_VISIBLE_DEVICES": ""}) == 0
    assert visible(8, {"CUDA_VISIBLE_DEVICES": "0"}) == 8


@pytest.mark.distributed
def test_lab14_gloo_ranks_on_one_gpu_never_touch_cuda(tmp_path):
    ranks = launch("labkit.runs.precision", 4, ARGS, timeout=300,
                   backend="gloo", run_dir=tmp_path / "hidden",
                   env={ENV: "1"})
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert {r["backend"] for r in ranks} == {"gloo"}
    assert all("deepspeed_bf16" in r and "fp8_all_gather" in r for r in ranks)


@pytest.mark.distributed
def test_with_the_gpu_visible_the_ranks_claim_it_and_fail(tmp_path):
    with pytest.raises(LaunchError) as e:
        launch("labkit.runs.precision", 4, ARGS, timeout=300,
               backend="gloo", run_dir=tmp_path / "visible",
               env={ENV: "1", "CUDA_VISIBLE_DEVICES": "0"})
    assert "invalid device ordinal" in str(e.value) or \
        "claimed a GPU" in str(e.value)
