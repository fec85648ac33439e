"""labkit.predict.pipeline_parallel: the schedules past 1F1B (chapter 18).

The orders are held to torch 2.13's own (each schedule class's
``_calculate_single_rank_operations``, called without a process group),
the simulator's ZB-H1 bubble to Qi et al. 2024's closed form, and the
bytes to what lab 18's run measured."""
import types

import pytest

from labkit.predict.pipeline_parallel import schedules as S
from labkit.predict.pipeline_parallel import simulate
from labkit.predict.pipeline_parallel import zero_bubble as Z


def _torch_order(name, p, m):
    """torch's compute actions per rank, as ``(kind, mb, chunk)``."""
    from torch.distributed.pipelining import schedules as T
    if name == "zb-h1":
        cls = T.ScheduleInterleavedZeroBubble
        me = types.SimpleNamespace(n_local_stages=1, pp_group_size=p,
                                   _n_microbatches=m,
                                   microbatches_per_round=m // max(1, m // p))
    else:
        cls = (T.ScheduleZBVZeroBubble if name == "zbv"
               else T.ScheduleDualPipeV)
        me = types.SimpleNamespace(pp_group_size=p, num_stages=2 * p,
                                   _n_microbatches=m)
    out = {}
    for r in range(p):
        ops = []
        for a in cls._calculate_single_rank_operations(me, r):
            if a is None:
                continue
            for b in a.sub_actions or (a,):
                chunk = [S.stage_index(name, p, r, c) for c in (0, 1)
                         ].index(b.stage_index)
                ops.append((b.computation_type.value, b.microbatch_index,
                            chunk))
        out[r] = ops
    return out


@pytest.mark.parametrize("name", S.SPLIT)
@pytest.mark.parametrize("p,m", [(2, 4), (2, 6), (3, 6), (4, 8), (4, 12),
                                 (8, 16)])
def test_orders_are_torchs(name, p, m):
    v = 2 if name in S.V_SHAPE else 1
    assert S.rank_order(name, p, m, v) == _torch_order(name, p, m)


def test_orders_as_lab_18_ran_them():
    # rank 1 of 2, 4 micro-batches, read from the run's stage calls
    o = S.rank_order("zb-h1", 2, 4)[1]
    assert "".join(f"{k}{mb}" for k, mb, _ in o) == \
        "F0I0F1I1W0F2I2W1F3I3W2W3"
    o = S.rank_order("dualpipev", 2, 4, 2)[0]
    assert [f"{S.stage_index('dualpipev', 2, 0, c)}{k}{mb}"
            for k, mb, c in o][:9] == ["0F0", "0F1", "0F2", "3F0", "3I0",
                                       "3W0", "3F1", "0F3", "3B1"]


def test_zb_h1_bubble_is_the_papers():
    # Qi et al. 2024, Sec. 3.1: (p - 1)(t_F + t_I - t_W) / (m (t_F+t_I+t_W))
    for p, m in ((2, 4), (4, 8), (4, 16), (8, 32)):
        for f, i, w in ((1, 1, 1), (1.0, 1.2, 0.8), (2.0, 2.0, 1.0)):
            tl = simulate("zb-h1", p, m, 1, f, i + w, weight=w / (i + w))
            assert tl.bubble == pytest.approx(
                Z.zb_h1_bubble(p, m, f, i, w))
        one = simulate("1f1b", p, m, 1, 1.0, 2.0).bubble
        assert Z.zb_h1_bubble(p, m) == pytest.approx(one / 3)


def test_v_schedules_halve_zb_h1_and_hold_p_microbatches():
    for p, m in ((2, 4), (4, 8), (4, 16)):
        zb = simulate("zb-h1", p, m, 1, 1.0, 2.0)
        zbv = simulate("zbv", p, m, 2, 1.0, 2.0)
        dual = simulate("dualpipev", p, m, 2, 1.0, 2.0)
        assert zbv.bubble == pytest.approx(zb.bubble / 2)
        assert dual.bubble == pytest.approx(zbv.bubble)
        # every rank holds what 1F1B's first holds (p stages' worth) ...
        assert zb.peak_activations == [p] * p
        assert zbv.peak_activations == [p] * p
        # ... and DualPipeV half a stage more (one chunk's micro-batch)
        assert dual.peak_activations == [p + 0.5] * p


def test_bytes_as_lab_18_measured():
    # 2 ranks, 4 micro-batches of 8 x 64 fp32, 8 blocks: the run's hook
    assert Z.stage_saved_bytes(4, 64, 8) == 10240
    assert Z.stage_saved_bytes(2, 64, 8) == 6144
    got = {s: Z.peak_bytes(s, 2, 4, 8, 64, 8) for s in ("1f1b",) + S.SPLIT}
    assert got == {"1f1b": [20480, 10240], "zb-h1": [20480, 20480],
                   "zbv": [24576, 24576], "dualpipev": [30720, 30720]}


def test_a_linear_layer_splits_its_backward_in_equal_halves():
    assert Z.linear_flops(8, 64, 32) == {"F": 32768, "I": 32768,
                                         "W": 32768}
    assert Z.weight_share(8, 64, 32) == 0.5


def test_when_pays_ranks_the_schedules():
    rows = {r["schedule"]: r for r in Z.when_pays(4, 8)}
    assert rows["1f1b"]["step_vs_1f1b"] == 1.0
    assert rows["zbv"]["bubble"] < rows["zb-h1"]["bubble"] < \
        rows["1f1b"]["bubble"]
    assert rows["dualpipev"]["peak_vs_1f1b"] > rows["zbv"]["peak_vs_1f1b"]
    short = {r["schedule"]: r for r in Z.when_pays(4, 4)}
    assert "error" in short["zbv"] and "bubble" in short["zb-h1"]


@pytest.mark.parametrize("args,message", [
    (("zbv", 2, 4, 1), "two chunks per rank"),
    (("dualpipev", 4, 6, 2), "micro-batches >= 2 x stages (8)"),
    (("zb-h1", 4, 3, 1), "zb-h1 needs micro-batches >= stages"),
    (("zb-h2", 4, 8, 1), "unknown schedule 'zb-h2'"),
])
def test_bad_parameters(args, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")
                       .replace(")", r"\)")):
        S.rank_order(*args)


def test_split_schedules_have_no_closed_form_in_costs():
    from labkit.predict.pipeline_parallel import costs
    with pytest.raises(ValueError, match="no closed form here"):
        costs.bubble_fraction("zbv", 2, 4, 2)
