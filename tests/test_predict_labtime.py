"""The run plan's estimate: the course's formulas, each assumption named."""
import pytest

from labkit.predict import labtime


def test_plan_uses_the_formulas():
    """More GPUs, less compute; a DeepSpeed op adds its measured compile."""
    sec = {"world_size": 2, "strategies": ["ddp"], "steps": 10,
           "global_batch": 8, "model": {"layers": 4, "hidden": 1024,
                                        "heads": 8, "vocab": 1000,
                                        "seq": 512}, "link": "nvlink4"}
    two = labtime.estimate("x", sec, gpu=True)
    four = labtime.estimate("x", {**sec, "world_size": 4}, gpu=True)
    assert four.compute_s == pytest.approx(two.compute_s / 2)
    op = labtime.estimate("x", sec, gpu=True, compile_ops=2)
    assert op.seconds - two.seconds == pytest.approx(2 * labtime.OP_COMPILE_S)
    with pytest.raises(ValueError, match="price"):
        labtime.cost(1.0, -1)


def test_deepspeed_ops_only_for_nvme_offload():
    """CPU offload with torch's Adam compiles nothing; only the optional
    NVMe cell needs async_io and cpu_adam (issue 17, defect 3)."""
    zero = {"zero": {"variants": ["zero3_offload_params"], "nvme_path": "/x"}}
    assert labtime.deepspeed_ops(zero) == []
    assert labtime.deepspeed_ops(zero, optional=True) == ["async_io",
                                                         "cpu_adam"]
    assert labtime.deepspeed_ops({"zero": {"variants": ["zero3"]}}) == []
    assert labtime.deepspeed_ops({"zero": {"variants": ["zero3"]}}, True) == []
    nvme = {"zero": {"variants": ["zero3_nvme", "zero3"]}}
    assert labtime.deepspeed_ops(nvme) == ["async_io", "cpu_adam"]
    # the plan still charges the NVMe cell's compiles
    assert labtime.plan(zero, gpu=True)["zero"].compile_s == \
        2 * labtime.OP_COMPILE_S
