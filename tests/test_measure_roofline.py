"""labkit.measure.roofline: rates are rates, and every op the pure
module predicts for the GPT's step is found, by its name, in the
profiler's record of a real step."""
import pytest
import torch

from labkit.measure import roofline as M
from labkit.nn.model import GPTConfig, batch, build
from labkit.predict import roofline as R


def test_rates_are_positive_and_finite():
    assert 0 < M.matmul_rate(64, "fp32", repeats=2) < 1e15
    assert 0 < M.matmul_rate(32, "bf16", repeats=2, k=16, n=8) < 1e15
    assert 0 < M.stream_rate(1 << 12, repeats=2) < 1e14
    # a call's fixed cost: microseconds, not nothing and not a step
    assert 1e-8 < M.call_overhead(calls=700, repeats=2) < 1e-3


def test_every_predicted_op_is_measured_by_name():
    cfg = GPTConfig(vocab=256, seq=16, layers=2, hidden=48, heads=4)
    torch.manual_seed(0)
    model = build(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = batch(cfg, 2, 0)
    got = M.step_times(model, x, y, opt, steps=1, warmup=1)
    names = {o.name for o in R.step_ops(2, 16, 2, 48, 4, 256)}
    assert set(got["ops"]) == names
    assert all(v > 0 for v in got["ops"].values())
    assert sum(got["ops"].values()) <= got["profiled_s"] * 1.05
    # this process's CPU time of the step: at most its threads' share of
    # the wall (plus a clock tick)
    assert 0 < got["step_cpu_s"] <= \
        got["step_s"] * (torch.get_num_threads() + 1) + 0.01


def test_matmuls_are_told_apart_by_their_widths():
    assert M.matmul_name([[32, 48], [48, 144]], 48, 256) == "qkv matmul"
    assert M.matmul_name([[192, 32], [32, 48]], 48, 256) == "mlp matmuls"
    assert M.matmul_name([[32, 48], [48, 256]], 48, 256) == "head matmul"
    assert M.matmul_name([[48, 32], [32, 48]], 48, 256) == \
        "attention out matmul"


def test_lab_12s_planner_rate_is_a_share_of_the_cores_peak():
    """flops_per_s: measured -- one training step of the lab's model on
    one thread, its hardware FLOPs over its CPU seconds: a positive rate
    below the thread's matmul peak (framework calls are in it), the
    caller's thread count kept."""
    from labkit.predict import fit as F
    model = {"layers": 2, "hidden": 32, "heads": 4, "vocab": 64,
             "seq": 16, "arch": "llama"}
    threads = torch.get_num_threads()
    got = M.planner_rate(model, 2)
    assert torch.get_num_threads() == threads
    assert 0 < got["flops_per_s"] < 1.5 * got["peak"]
    assert got["flops_per_s"] == pytest.approx(
        F.step_flops(model, 2) / got["step_cpu_s"])
