"""labkit.measure.roofline: rates are rates, and every op the pure
module predicts for the GPT's step is found, by its name, in the
profiler's record of a real step."""
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
