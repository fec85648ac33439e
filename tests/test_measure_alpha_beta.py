"""The run's own alpha-beta (lab 3): the pricing rules on made-up fits,
and a real calibration on 2 gloo ranks (its structure, not its speed)."""
import pytest

from labkit.measure import alpha_beta as AB
from labkit.predict import sharding as S

FITS = {op: {"alpha": 1e-5, "beta": 1e9} for op in AB.OPS}


def test_one_call_is_steps_alpha_plus_ring_bytes_over_beta():
    # all-reduce on 4 ranks: 2(N-1) = 6 steps, 2(N-1)/N S = 1.5 S sent
    assert AB.call_seconds("all_reduce", 4e6, 4, FITS) == pytest.approx(
        6e-5 + 1.5 * 4e6 / 1e9)
    assert AB.call_seconds("all_gather", 4e6, 4, FITS) == pytest.approx(
        3e-5 + 0.75 * 4e6 / 1e9)
    assert AB.call_seconds("all_reduce", 4e6, 1, FITS) == 0.0


def test_price_calls_skips_what_was_not_calibrated():
    calls = [{"op": "all_gather", "bytes": 1e6, "group_size": 2},
             {"op": "broadcast", "bytes": 1e6, "group_size": 2}]
    assert AB.price_calls(calls, FITS) == pytest.approx(
        AB.call_seconds("all_gather", 1e6, 2, FITS))


def test_overlap_hides_what_fits_behind_its_phase():
    comms = S.step_comm(1e6, 4, "full_shard")
    comm = sum(AB.call_seconds(c.op, c.nbytes, c.group_size, FITS)
               for c in comms)
    slow = AB.overlap(comms, FITS, compute_s=100 * comm)
    assert slow["hidden_fraction"] == 1.0
    assert slow["step_s"] == pytest.approx(100 * comm)
    fast = AB.overlap(comms, FITS, compute_s=0.0)
    assert fast["hidden_fraction"] == 0.0
    assert fast["step_s"] == pytest.approx(comm)


@pytest.mark.distributed
def test_a_timed_sharding_run_saves_its_fits(tmp_path):
    from labkit.launch import launch
    ranks = launch("labkit.runs.sharding", 2, {
        "strategies": "ddp", "steps": 3, "time_steps": 1},
        timeout=240, run_dir=tmp_path)
    fits = ranks[0]["alpha_beta"]
    assert set(fits) == set(AB.OPS)
    for op, f in fits.items():
        assert f["beta"] > 0 and f["alpha"] >= 0, op
        assert f["ranks"] == 2 and len(f["sizes"]) == len(f["seconds"])
    assert ranks[1]["alpha_beta"] == fits    # rank 0's fit, everywhere
