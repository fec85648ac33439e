"""Checkpoint bytes from the ledger, and Young/Daly against Daly's figures."""
import math

import pytest

from labkit.predict import checkpoint as C
from labkit.predict.memory import ledger

PSI = 7e9


def test_sharded_checkpoint_is_the_ledger_without_gradients():
    led = ledger(PSI, 8, "zero3")
    per_rank = C.checkpoint_bytes(PSI, 8, "zero3")
    assert per_rank == [led.params_gpu + led.optimizer_gpu] * 8
    assert sum(per_rank) == pytest.approx(14 * PSI)       # 2 + 12 bytes


def test_who_writes_what():
    full = C.checkpoint_bytes(PSI, 8, "ddp", precision="fp32")
    assert full == [12 * PSI] + [0.0] * 7                 # rank 0 only
    z1 = C.checkpoint_bytes(PSI, 8, "zero1")
    assert z1[0] == pytest.approx(2 * PSI + 12 * PSI / 8)
    assert z1[1:] == [pytest.approx(12 * PSI / 8)] * 7
    assert C.checkpoint_bytes(PSI, 8, "zero2") == z1      # no gradients
    gathered = C.checkpoint_bytes(PSI, 8, "full_shard", state_dict="full")
    assert gathered == [14 * PSI] + [0.0] * 7
    with pytest.raises(ValueError, match="state_dict"):
        C.checkpoint_bytes(PSI, 8, state_dict="half")


def test_fsdp_saves_12_bytes_per_parameter_deepspeed_14():
    """FSDP's fp32 sharded weights are its master copy (issue 29, item 7)."""
    fsdp = C.checkpoint_bytes(PSI, 8, "full_shard", engine="fsdp")
    ds = C.checkpoint_bytes(PSI, 8, "zero3", engine="deepspeed")
    assert sum(fsdp) == pytest.approx(12 * PSI)
    assert sum(ds) == pytest.approx(14 * PSI)
    assert C.saved_bytes_per_param(engine="fsdp") == (4.0, 8.0)
    assert C.saved_bytes_per_param(engine="deepspeed") == (2.0, 12.0)
    full = C.checkpoint_bytes(PSI, 8, "full_shard", state_dict="full",
                              engine="fsdp")
    assert full == [12 * PSI] + [0.0] * 7
    # fp32 training: no master copy in either
    assert sum(C.checkpoint_bytes(PSI, 8, "zero3", "fp32", engine="fsdp")) \
        == pytest.approx(sum(C.checkpoint_bytes(PSI, 8, "zero3", "fp32")))
    with pytest.raises(ValueError, match="engine"):
        C.checkpoint_bytes(PSI, 8, engine="megatron")
    with pytest.raises(ValueError, match="no ZeRO-1/2"):
        C.checkpoint_bytes(PSI, 8, "zero2", engine="fsdp")


def test_write_time_shared_or_local_disks():
    b = C.checkpoint_bytes(PSI, 8, "zero3")
    assert C.write_seconds(b, 1e9) == pytest.approx(sum(b) / 1e9)
    assert C.write_seconds(b, 1e9, shared=False) == pytest.approx(b[0] / 1e9)
    with pytest.raises(ValueError):
        C.write_seconds(b, 0)


@pytest.mark.parametrize("mtbf_min, expected_min", [
    (24 * 60, 117), (6 * 60, 57), (15, 9.1)])
def test_daly_figures_3_to_5(mtbf_min, expected_min):
    """Daly 2006, Figs. 3-5: delta = 5 min, the model's tau_opt."""
    got = C.daly_interval(5 * 60, mtbf_min * 60) / 60
    assert got == pytest.approx(expected_min, abs=0.5 if expected_min > 10
                                else 0.05)


def test_young_is_daly_first_order_and_minimises_the_loss():
    delta, m = 60.0, 50 * 3600.0
    tau = C.young_interval(delta, m)
    assert tau == pytest.approx(math.sqrt(2 * delta * m))
    assert C.daly_interval(delta, m) == pytest.approx(tau, rel=0.01)
    lost = C.lost_fraction(tau, delta, m)
    assert lost < C.lost_fraction(tau / 2, delta, m)
    assert lost < C.lost_fraction(tau * 2, delta, m)
    assert lost == pytest.approx(math.sqrt(2 * delta / m), rel=0.05)
    assert C.daly_interval(10.0, 4.0) == 4.0           # delta >= 2M


def test_job_mtbf_and_lost_steps():
    assert C.job_mtbf(50_000 * 3600, 1000) == pytest.approx(50 * 3600)
    assert C.lost_steps(5, 4) == 1
    with pytest.raises(ValueError):
        C.lost_steps(3, 4)
    with pytest.raises(ValueError):
        C.young_interval(0, 10)
