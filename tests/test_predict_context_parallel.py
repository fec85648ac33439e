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


def test_gqa_shrinks_ring_and_saved_by_the_kv_width():
    from labkit import arch
    a = arch.preset("llama3.1-405b")            # 128 heads, 8 KV heads
    s, mha = 131072, a.with_(kv_heads=0)        # 0: one K/V per head
    assert a.kv_dim * 16 == a.q_dim == mha.kv_dim
    ring, ring_mha = CP.ring(a, 1, s, 16), CP.ring(mha, 1, s, 16)
    assert ring_mha["send"]["bytes"] == 16 * ring["send"]["bytes"]
    assert ring_mha == CP.ring_bytes(1, s, a.hidden, 16, 2)
    rows = s // 16
    assert CP.saved(a, 1, s, 16) == (2 * rows * (a.q_dim + a.kv_dim) * 2
                                     + rows * a.heads * 4)
    assert CP.saved(mha, 1, s, 16) == CP.saved_bytes(1, s, a.hidden,
                                                     a.heads, 16, 2, 4)
    # Ulysses: Q and output at full width, K and V at the KV width
    rows8 = s // 8
    assert CP.ulysses(a, 1, s, 8)["all_to_all"] == {
        "calls": 8, "bytes": 2 * rows8 * (2 * a.q_dim + 2 * a.kv_dim) * 2}
    assert CP.ulysses_max(a) == 8
    with pytest.raises(ValueError, match="KV heads"):
        CP.ulysses(a, 1, s, 16)
