"""labkit.dryrun.experts_lab: one EP rank on fake tensors (the run
module's own model, DDP and Adam; routing assumed even) against its
predictions -- model states to the byte, activations = the MoE ledger on
one EP rank to the byte -- at small sizes and at the gpu8 profile's
(Mixtral 8x7B's MoE layers, EP over 8 ranks)."""
import pytest

from labkit.dryrun import labs as L
from labkit.dryrun.cli import dry_profile
from labkit.dryrun.experts_lab import even
from labkit.dryrun.step import dry_step

SMALL = dict(world_size=4, ep=2, experts=4, top_k=2, layers=2, hidden=32,
             heads=4, expert_ffn=32, vocab=64, seq=16, global_batch=8,
             aux=0.1, lr=1e-3, bf16=False)


@pytest.mark.parametrize("change", [{}, {"bf16": True},
                                    {"world_size": 8, "ep": 8, "experts": 8,
                                     "global_batch": 16}])
def test_small_rank_is_the_prediction(change):
    case, = L.ADAPTERS["experts"]({**SMALL, **change})
    got = dry_step(case)
    for k in ("params", "grads", "optimizer", "activations"):
        assert got[k] == case.predicted[k], k


def test_even_split():
    assert even(10, 4) == [3, 3, 2, 2] and sum(even(4096, 8)) == 4096


def test_bad_profile_is_one_line():
    with pytest.raises(ValueError, match="do not divide"):
        L.ADAPTERS["experts"]({**SMALL, "experts": 3, "ep": 2})


def test_gpu8_profile_agrees():
    out = dry_profile("gpu8", 80e9, only="experts", workers=1)
    row, = out["experts"]["cases"]
    assert row["agrees"] and row["states_ratio"] == 1.0
    assert row["activations"] == row["predicted"]["activations"]
    assert row["predicted"]["tokens_received_per_layer"] == 2 * 2 * 1024
    assert row["fits"]
