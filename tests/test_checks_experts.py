"""labkit.checks.experts: the lab's bad inputs, one line each."""
import pytest

from labkit.checks import experts

GOOD = dict(profile="cpu", world_size=4, ep=2, experts=4, top_k=2,
            capacity_factors=[1.0, 1.25, 2.0], hidden=32, heads=4,
            expert_ffn=32, global_batch=8, steps=6, aux=0.01)


def test_good_is_cpu():
    assert experts(**GOOD) is False


@pytest.mark.parametrize("change, words", [
    (dict(experts=5), "experts=5 do not divide over ep=2"),
    (dict(top_k=5), "top_k=5 must be between 1 and experts=4"),
    (dict(capacity_factors=[1.0, 0.0]), r"capacity_factors\[1\]=0.0: must be a finite number > 0"),
    (dict(capacity_factors=[-1]), r"capacity_factors\[0\]=-1: must be a finite number > 0"),
    (dict(ep=3), "ep=3 does not divide the world of 4 ranks"),
    (dict(global_batch=6), "global batch 6"),
    (dict(profile="tpu"), "unknown profile"),
])
def test_bad_input_one_line(change, words):
    with pytest.raises(ValueError, match=words) as e:
        experts(**{**GOOD, **change})
    assert "\n" not in str(e.value)
