"""Context parallelism's formulas."""
import pytest

from labkit.predict import context_parallel as CP


def test_ring_and_ulysses_bytes():
    kv = 2 * 1 * 1024 * 512 * 2
    assert CP.ring_bytes(1, 4096, 512, 4, 2)["send"] == {
        "calls": 3 + 3 + 4, "bytes": 10 * kv}
    assert CP.ring_bytes(1, 4096, 512, 4, 2)["recv"] == \
        CP.ring_bytes(1, 4096, 512, 4, 2)["send"]
    assert CP.ulysses_bytes(1, 4096, 512, 4, 2) == {
        "all_to_all": {"calls": 8, "bytes": 8 * 1024 * 512 * 2}}
    assert CP.ring_bytes(1, 4096, 512, 1) == {} == \
        CP.ulysses_bytes(1, 4096, 512, 1)


def test_activations_divide_by_cp():
    one = CP.saved_bytes(2, 4096, 1024, 16, 1)
    for p in (2, 4, 8):
        assert CP.saved_bytes(2, 4096, 1024, 16, p) * p == one


@pytest.mark.parametrize("p", [2, 4, 8])
def test_causal_load(p):
    contiguous = CP.causal_work(p, balanced=False)
    zigzag = CP.causal_work(p, balanced=True)
    # the same total: half the full square plus the diagonal blocks
    assert sum(contiguous) == 2 * p * (p + 1)
    assert sum(zigzag) == p * (2 * p + 1)
    assert CP.imbalance(contiguous) == pytest.approx(2 * p / (p + 1))
    assert CP.imbalance(zigzag) == 1.0
    assert CP.full_work(p, False) == [4 * p] * p


def test_bad_input():
    with pytest.raises(ValueError):
        CP.ring_bytes(1, 100, 64, 3)
    with pytest.raises(ValueError):
        CP.saved_bytes(1, 64, 64, 4, 0)
