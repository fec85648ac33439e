"""labkit.predict.roofline: the step's FLOPs against Megatron's closed
form, the parameters against the ledger, the thresholds against their
own definitions (the bound met with equality), the step-time model."""
import pytest

from labkit.predict import roofline as R
from labkit.predict.model.flops import model_flops
from labkit.predict.model.params import gpt_params

SHAPE = dict(batch=8, seq=128, layers=2, hidden=192, heads=4, vocab=256)


def test_ridge_is_peak_over_bandwidth_from_the_data_sheets():
    assert R.ridge(R.chip("h100")) == pytest.approx(989.4e12 / 3.35e12)
    assert R.ridge(R.chip("h200")) < R.ridge(R.chip("h100"))  # more HBM
    with pytest.raises(ValueError, match="unknown chip 'tpu'"):
        R.chip("tpu")


def test_op_time_is_the_larger_term():
    assert R.op_time(1e12, 1e9, 1e12, 1e12) == 1.0
    assert R.op_time(1e9, 1e12, 1e12, 1e12) == 1.0
    assert R.bound(300, 1, 295, 1) == "compute"
    assert R.bound(290, 1, 295, 1) == "memory"


def test_matmul_counts():
    assert R.matmul(2, 3, 4, e=2) == (48.0, 2.0 * (6 + 12 + 8))


@pytest.mark.parametrize("layers,hidden,vocab", [(2, 192, 256),
                                                 (4, 1024, 50304)])
def test_step_matmul_flops_equal_narayanan_eq3(layers, hidden, vocab):
    """Model FLOPs: the matmuls and the attention core without flash
    attention's recomputed Q K^T (half a forward of the 3.5 counted)."""
    ops = R.step_ops(8, 128, layers, hidden, 4, vocab)
    f = sum(o.flops * o.count * (3 / 3.5 if o.kind == "attention" else 1)
            for o in ops if o.kind in ("matmul", "attention"))
    assert f == pytest.approx(model_flops(8, 128, layers, hidden, vocab))


def test_each_call_pays_the_fixed_cost():
    """AdamW: 10 calls per parameter tensor (torch's _single_tensor_adam),
    29 tensors in the 2-layer GPT; the overhead adds to the roofline."""
    ops = {o.name: o for o in R.step_ops(**SHAPE)}
    assert ops["adamw"].calls == R.ADAMW_CALLS * (12 * SHAPE["layers"] + 5)
    bare = R.predict(list(ops.values()), 100e9, 10e9)
    paid = R.predict(list(ops.values()), 100e9, 10e9, call_s=1e-6)
    calls = sum(o.calls for o in ops.values())
    assert paid["step_s"] - bare["step_s"] == pytest.approx(calls * 1e-6)


def test_adamw_reads_and_writes_every_parameter():
    ops = {o.name: o for o in R.step_ops(**SHAPE)}
    psi = gpt_params(SHAPE["layers"], SHAPE["hidden"], SHAPE["heads"],
                     SHAPE["vocab"], SHAPE["seq"])
    assert ops["adamw"].nbytes == 7 * 4 * psi


def test_predict_sums_its_ops_and_calibrates_by_name():
    ops = R.step_ops(**SHAPE)
    p = R.predict(ops, 100e9, 10e9)
    assert p["step_s"] == pytest.approx(sum(r["seconds"] for r in p["ops"]))
    half = R.predict(ops, 100e9, 10e9, efficiency={"mlp matmuls": 0.5})
    mlp = [r for r in half["ops"] if r["op"] == "mlp matmuls"][0]
    assert mlp["seconds"] == pytest.approx(2 * [
        r for r in p["ops"] if r["op"] == "mlp matmuls"][0]["seconds"])


def test_fsdp_and_dp_thresholds_meet_their_bound():
    peak, link, n = 989.4e12, 450e9, 8
    t = R.fsdp_tokens(peak, link, n)
    psi = 1e9                                # any unit size
    assert 2 * psi * t / peak == pytest.approx((n - 1) / n * 2 * psi / link)
    assert R.dp_tokens(peak, link, n) == pytest.approx(2 * t)  # fp32 grads
    assert R.fsdp_tokens(peak, link, 1) == 0                   # no peers


def test_dp_stops_paying_where_tokens_per_rank_fall_below():
    peak, link, tokens = 989.4e12, 50e9, 4 * 2 ** 20
    n = R.dp_max_ranks(tokens, peak, link)
    assert tokens / n >= R.dp_tokens(peak, link, n)
    assert tokens / (n + 1) < R.dp_tokens(peak, link, n + 1)


def test_tp_tokens_reach_the_ridge_and_tp_max_hides():
    peak, bw = R.chip("h100")
    t = R.tp_tokens(peak, bw, 4096, 14336, 8)
    f, b = R.matmul(t, 4096, 14336 / 8, 2)
    assert f / b == pytest.approx(peak / bw)
    assert R.tp_tokens(peak, bw, 64, 64, 8) is None    # too thin a shard
    tp = R.tp_max(peak, 450e9, 14336)
    assert tp - 1 <= 2 * 14336 * 450e9 / (peak * 2) < tp


def test_few_tokens_per_expert_are_memory_bound():
    h800 = R.chip("h800")
    few = R.expert_time(128, 7168, 2048, *h800)
    many = R.expert_time(8192, 7168, 2048, *h800)
    assert few["efficiency"] < 0.5 and many["efficiency"] == 1.0


def test_step_time_adds_only_the_exposed_communication():
    ops = R.step_ops(**SHAPE)
    base = R.step_time(ops, 100e9, 10e9)
    assert base["step_s"] == base["compute_s"] and base["exposed_s"] == 0
    work = base["compute_s"] - [r for r in base["ops"]
                                if r["kind"] == "optimizer"][0]["seconds"]
    hidden = R.step_time(ops, 100e9, 10e9, comm={"backward": work / 2})
    assert hidden["exposed_s"] == 0
    late = R.step_time(ops, 100e9, 10e9, comm={"step": 1.0,
                                               "forward": work})
    assert late["exposed_s"] == pytest.approx(1.0 + work * 2 / 3)
