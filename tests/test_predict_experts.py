"""labkit.predict.experts: capacity, drops, the all-to-all table, the
uniform estimate and the bad inputs (pure formulas)."""
import pytest

from labkit.predict import experts as X


def test_capacity_is_the_ceiling():
    assert X.capacity(1.0, 2, 64, 4) == 32
    assert X.capacity(1.25, 2, 64, 4) == 40
    assert X.capacity(1.0, 1, 10, 3) == 4          # ceil(10/3)
    with pytest.raises(ValueError, match="> 0"):
        X.capacity(0, 2, 64, 4)


def test_dropped_and_kept():
    assert X.dropped([10, 3, 7], 5) == 5 + 2
    assert X.kept([10, 3, 7], 5) == [5, 3, 5]
    assert X.dropped([10, 3], None) == 0


def test_split_sizes_and_bytes():
    kept = [[1, 2, 3, 4], [5, 6, 7, 8]]             # 2 EP ranks, 2 each
    send, recv = X.split_sizes(kept, 0, 2)
    assert send == [3, 7] and recv == [3, 11]
    b = X.all_to_all_bytes(kept, 0, 2, hidden=8, elt=4)
    assert b["dispatch_forward"] == b["combine_backward"] == 10 * 32
    assert b["combine_forward"] == b["dispatch_backward"] == 14 * 32
    assert b["dispatch_off_rank"] == 7 * 32 and b["counts"] == 32


def test_uniform_router_meets_the_estimate():
    t, k, e, ep, h = 64, 2, 8, 4, 16
    even = [[t * k // e] * e for _ in range(ep)]
    b = X.all_to_all_bytes(even, 1, ep, h)
    assert b["dispatch_off_rank"] == X.uniform_bytes(k, t, h, ep)
    assert b["dispatch_forward"] == k * t * h * 4


def test_states_per_rank_ddp_and_fsdp_dense():
    # 100 dense + 800 routed parameters, EP4 x DP2 on 8 ranks, fp32 Adam
    ddp = X.states_per_rank(900, 800, ep=4, world=8)
    assert ddp["parameters"] == 100 + 200
    assert ddp["total"] == 300 * 16 and ddp["optimizer"] == 300 * 8
    fsdp = X.states_per_rank(900, 800, 4, 8, (2, 2, 12), dense_sharded=True)
    assert fsdp["parameters"] == 100 / 8 + 200
    assert fsdp["total"] == (12.5 + 200) * 16


@pytest.mark.parametrize("args, words", [
    ((6, 2, 4, 4), "experts=6 do not divide"),
    ((8, 9, 4, 4), "top_k=9"),
    ((8, 2, 3, 4), "ep=3 does not divide"),
    ((8, 2, 2, 4, [1.0, 0]), "capacity factor"),
])
def test_bad_input_one_line(args, words):
    with pytest.raises(ValueError, match=words):
        X.check(*args)
