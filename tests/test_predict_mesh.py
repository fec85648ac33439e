"""2-D parallelism's formulas: bytes per rank and per mesh dimension."""
import math

import pytest

from labkit.predict import mesh as M
from labkit.predict import tensor_parallel as TP
from labkit.predict.memory import gpt_params

SHAPE = dict(vocab=256, seq=32, layers=2, hidden=64)


def test_unit_shapes_are_the_gpt_split_by_tp():
    for tp in (1, 2, 4):
        units = M.unit_shapes(**SHAPE, tp=tp)
        assert len(units) == SHAPE["layers"] + 2
        block = sum(math.prod(s) for s in units[1])
        assert block == TP.layer_params(64, tp)["total"]
    n = sum(math.prod(s) for u in M.unit_shapes(**SHAPE, tp=1) for s in u)
    assert n == gpt_params(2, 64, 4, 256, 32)


@pytest.mark.parametrize("dp,tp", [(1, 4), (2, 2), (4, 1), (2, 4), (4, 2)])
def test_tp_divides_then_fsdp_divides_again(dp, tp):
    one = M.rank_param_bytes(**SHAPE, dp=1, tp=1)
    got = M.rank_param_bytes(**SHAPE, dp=dp, tp=tp)
    assert got == M.fsdp_rank_param_bytes(**SHAPE, dp=dp, tp=tp)
    assert got * dp == M.rank_param_bytes(**SHAPE, dp=1, tp=tp)
    assert got <= one / dp
    if tp == 1:
        assert got == one / dp


def test_tp_comm_is_chapter_5s_per_layer():
    # no sequence parallelism: Megatron's 4 all-reduces per layer
    got = M.tp_comm(2, 4, 32, 64, tp=2, bytes_per_element=4)
    ref = TP.comm_payload_bytes(4, 32, 64, 2, 4, layers=2)
    assert {k: v["bytes"] for k, v in got.items()} == ref
    assert got["all_reduce"]["calls"] == 8
    # with it: the pairs of Korthikanti Fig. 5, one gather before the head
    # and one after the embedding, and the LayerNorm gradients
    sp = M.tp_comm(2, 4, 32, 64, tp=2, sequence_parallel=True)
    size = 4 * 32 * 64 * 4
    assert sp["all_gather"] == {"calls": 10, "bytes": 10 * size}
    assert sp["reduce_scatter"] == {"calls": 8, "bytes": 8 * size}
    assert sp["all_reduce"] == {"calls": 8, "bytes": 8 * 64 * 4}
    assert M.tp_comm(2, 4, 32, 64, tp=1) == {}


def test_dp_comm_is_fsdp_on_the_tp_local_units():
    # FULL_SHARD: 3 x the TP-local parameters per step (ZeRO-3's 3 Phi)
    for dp, tp in ((2, 2), (4, 1), (2, 4)):
        c = M.dp_comm(**SHAPE, dp=dp, tp=tp)
        phi = M.rank_param_bytes(**SHAPE, dp=1, tp=tp)
        assert c["all_gather"]["bytes"] == 2 * phi
        assert c["reduce_scatter"]["bytes"] == phi
    assert M.dp_comm(**SHAPE, dp=1, tp=4) == {}


def test_shapes_and_bad_input():
    assert M.shapes(8) == [(8, 1), (4, 2), (2, 4), (1, 8)]
    with pytest.raises(ValueError):
        M.unit_shapes(256, 32, 2, 64, tp=3)
