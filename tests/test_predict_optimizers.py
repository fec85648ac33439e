"""labkit.predict.optimizers: state bytes per rank and Muon's traffic."""
import pytest

from labkit.predict import optimizers as O

TINY = O.gpt_tensors(layers=2, hidden=64, vocab=256, seq=32)


def test_the_ledger_k_of_each_optimizer():
    # ZeRO Sec. 3.1: mixed-precision Adam keeps K = 12 bytes per parameter
    assert O.bytes_per_param("adamw") == 12
    # Dettmers et al. 2022: two 8-bit states + an fp32 absmax per 256
    assert O.bytes_per_param("adamw8bit") == pytest.approx(4 + 2.03125)
    assert O.bytes_per_param("muon") == 8            # master + momentum
    assert O.bytes_per_param("adafactor", "fp32") == 0   # factored away


def test_one_tensor_of_each_optimizer():
    assert O.tensor_state("adamw", (8, 4)) == 2 * 4 * 32 + 4
    # Shazeer & Stern 2018 eq. 4-5: a row and a column factor
    assert O.tensor_state("adafactor", (8, 4)) == 4 * (8 + 4) + 4
    assert O.tensor_state("adafactor", (8,)) == 4 * 8 + 4
    n = 64 * 128                                     # >= 4096: 8-bit
    assert O.tensor_state("adamw8bit", (64, 128)) == \
        2 * (n + 4 * n // 256 + 4 * 256)
    assert O.tensor_state("adamw8bit", (32, 64)) == 2 * 4 * 32 * 64
    assert O.tensor_state("muon", (8, 4), muon=True) == 4 * 32
    assert O.tensor_state("muon", (8,)) == O.tensor_state("adamw", (8,))
    with pytest.raises(ValueError, match="unknown optimizer"):
        O.tensor_state("lion", (8,))


def test_sharding_divides_rows_but_not_adafactors_columns():
    one, two = (O.state_bytes(o, TINY, w) for o in ("adamw",) for w in (1, 2))
    assert one - 4 * len(TINY) == 2 * (two - 4 * len(TINY))
    # a column factor is not split: each rank keeps all n columns
    assert O.tensor_state("adafactor", O.shard((256, 64), 2)) == \
        4 * (128 + 64) + 4
    with pytest.raises(ValueError, match="uneven"):
        O.shard((3, 4), 2)


def test_muon_traffic_gather_against_dealt():
    mats = [s for _, s, m in TINY if m]
    full = sum(4 * s[0] * s[1] for s in mats)
    g = O.muon_traffic(TINY, 4, "gather")
    d = O.muon_traffic(TINY, 4, "dealt")
    assert g["ops"] == {"all_gather": {"calls": len(mats), "bytes": full}}
    assert d["ops"]["gather"] == d["ops"]["scatter"] == g["ops"][
        "all_gather"]
    assert d["received"] / g["received"] == pytest.approx(2 / 4)
    assert d["ns_flops"] == g["ns_flops"] / 4
    assert O.muon_traffic(TINY, 1, "gather")["ops"] == {}
    # Jordan et al. 2024: X X^T, then (b A + c A A) X, 5 times
    assert O.ns_flops((3, 2)) == 5 * (4 * 2 * 2 * 3 + 2 * 8)
