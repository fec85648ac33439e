"""TP communication and activation memory against Megatron's papers."""
import pytest

from labkit.predict import tensor_parallel as TP
from labkit.predict.memory import gpt_params

# GPT-3 175B (Brown et al. 2020): a = 96 heads, h = 12288, s = 2048; t = 8
A, H, S, T = 96, 12288, 2048, 8


def test_four_all_reduces_of_the_activation_per_layer():
    assert TP.collective_calls() == {"forward": {"all_reduce": 2},
                                     "backward": {"all_reduce": 2}}
    b, s, h = 2, 16, 64
    assert TP.comm_payload_bytes(b, s, h, 4, 4) == {"all_reduce":
                                                    4 * b * s * h * 4}
    assert TP.comm_payload_bytes(b, s, h, 4, 4, phase="forward") == {
        "all_reduce": 2 * b * s * h * 4}
    assert TP.comm_payload_bytes(b, s, h, 1) == {}


@pytest.mark.parametrize("t", [2, 4, 8])
def test_bytes_sent_is_8bsh_t_minus_1_over_t(t):
    # Narayanan et al. 2021, Sec. 3.2: 8 b s h (t-1)/t elements per layer
    b, s, h = 1, S, H
    want = 8 * b * s * h * (t - 1) / t * 2          # bf16
    assert TP.comm_bytes_sent(b, s, h, t) == pytest.approx(want)
    # Korthikanti et al. 2022, Sec. 4.2.2: sequence parallelism costs the same
    assert TP.comm_bytes_sent(b, s, h, t, sequence_parallel=True) == \
        pytest.approx(want)


def test_korthikanti_activation_formulas():
    b = 1
    sbh = S * b * H
    # Sec. 5: for GPT-3 the attention term 5as/h is 80, more than the 34
    assert 5 * A * S / H == 80
    tp = TP.activation_bytes(S, b, H, A, tp=T)
    assert tp == pytest.approx(sbh * (10 + 24 / T + 5 * A * S / (H * T)))
    sp = TP.activation_bytes(S, b, H, A, tp=T, sequence_parallel=True)
    assert sp == pytest.approx(sbh / T * (34 + 5 * A * S / H))
    both = TP.activation_bytes(S, b, H, A, tp=T, sequence_parallel=True,
                               recompute="selective")
    assert both == pytest.approx(34 * sbh / T)
    assert TP.activation_bytes(S, b, H, A, tp=T, recompute="full") == \
        pytest.approx(2 * sbh)
    # abstract: sequence parallelism + selective recomputation cut the
    # activation memory about 5x against tensor parallelism alone
    assert 5 <= tp / both < 6
    assert TP.activation_bytes(S, b, H, A, layers=96) == pytest.approx(
        96 * TP.activation_bytes(S, b, H, A))


def test_layer_params_split_adds_up():
    h = 256
    per_layer = gpt_params(1, h, 4, 1, 1, tied=True, final_norm=False) \
        - 2 * h                                      # one layer, no embeds
    for t in (1, 2, 4, 8):
        p = TP.layer_params(h, t)
        assert t * p["sharded"] + p["replicated"] == per_layer
    with pytest.raises(ValueError):
        TP.layer_params(100, 8)


def test_tp_needs_nvlink():
    fast = TP.comm_compute(1, S, H, T, link="nvlink3")
    slow = TP.comm_compute(1, S, H, T, link="ib-hdr")
    assert fast["ratio"] < 0.15 < 0.5 < slow["ratio"]
    # comm / compute falls as 1/h: a wider model hides TP better
    small = TP.comm_compute(1, S, 2048, T, link="nvlink3")
    assert small["ratio"] > fast["ratio"]


def test_check_tolerance_is_a_few_eps():
    assert TP.check_tolerance("fp32") == 4 * 2.0 ** -23
    assert TP.check_tolerance("bf16") == 4 * 2.0 ** -7
    with pytest.raises(ValueError):
        TP.check_tolerance("fp8")


def test_rank_params_add_up_to_the_model_plus_what_tp_replicates():
    from labkit.predict.tensor_parallel import layer_params, rank_params
    whole = rank_params(2, 64, 256, 32)
    assert whole == [2 * layer_params(64)["total"] + 2 * 256 * 64 + 32 * 64
                     + 2 * 64]
    assert sum(rank_params(2, 64, 256, 32, pp=2)) == whole[0]
    tp = rank_params(2, 64, 256, 32, tp=2)
    replicated = 2 * layer_params(64, 2)["replicated"] + 32 * 64 + 2 * 64
    assert tp[0] == tp[1] and sum(tp) == whole[0] + replicated
    with pytest.raises(ValueError):
        rank_params(3, 64, 256, 32, pp=2)


# -- the record in place of the shape: the GPT preset equals the positional
# results, and a Llama record splits its KV heads -------------------------

GPTS = ["gpt-tiny", "gpt-1.3b", "gpt-13b", "gpt-70b", "gpt-175b"]


@pytest.mark.parametrize("name", GPTS)
def test_gpt_preset_through_the_record_equals_the_positional(name):
    from labkit.predict.model import arch
    a = arch.preset(name)
    L, h, n, V, s = a.layers, a.hidden, a.heads, a.vocab, a.max_seq
    for t in (1, 2, 4):
        if n % t or V % t:
            continue
        old = TP.layer_params(h, t)
        new = TP.layer_params(a, t)
        assert {k: new[k] for k in old} == old
        for pp in (1, 2):
            assert TP.rank_params(a, tp=t, pp=pp) == TP.rank_params(
                L, h, V, s, tp=t, pp=pp)
        for sp, rc in ((False, "none"), (True, "selective"),
                       (False, "full")):
            assert TP.activation_bytes(s, 2, a, tp=t, sequence_parallel=sp,
                                       recompute=rc, layers=3) == \
                TP.activation_bytes(s, 2, h, n, t, sp, rc, 3)
        assert TP.comm_payload_bytes(2, s, a, t) == \
            TP.comm_payload_bytes(2, s, h, t)
        assert TP.comm_compute(1, s, a, t) == TP.comm_compute(1, s, h, t)
    assert TP.layer_flops(2, s, a) == TP.layer_flops(2, s, h)


def test_llama_record_through_tensor_parallel():
    from labkit import arch
    from labkit.predict.model import params as P
    a = arch.preset("llama3-70b")
    one = TP.layer_params(a, 8)
    assert one["kv_heads_per_rank"] == 1 and one["replicas"] == 1
    # every rank's share adds up to the record (tp 1, pp 1)
    assert TP.rank_params(a) == [P.total(a)]
    # tp 8: the norms are on all 8 ranks of a stage, the rest split
    norms = 80 * one["replicated"] + 8192            # + the final RMSNorm
    assert sum(TP.rank_params(a, tp=8, pp=4)) == P.total(a) + 7 * norms
    # GQA: K/V projections 8 x 128 wide, SwiGLU: 3 matrices of 28672
    h, f, kv = 8192, 28672, 1024
    mm = 2 * h * h + 2 * h * kv + 3 * h * f
    assert TP.layer_flops(1, 4096, a) == 3.0 * (2 * mm * 4096
                                                + 4 * 4096 ** 2 * h)
    gpt_shape = TP.activation_bytes(4096, 1, h, 64, 8, recompute="selective")
    assert TP.activation_bytes(4096, 1, a, tp=8,
                               recompute="selective") < gpt_shape
