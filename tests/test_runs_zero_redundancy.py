"""PyTorch's ZeRO-1 (DDP + ZeroRedundancyOptimizer) beside DeepSpeed's
stage 1, on 2 gloo ranks: same losses as one process, each rank's Adam
state is 8 bytes per element of the parameters it owns, and together the
ranks hold the ledger's 8 Psi once."""
import pytest

from labkit.predict.memory import ledger

STEPS = 3


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    from labkit.launch import launch
    return launch("labkit.runs.zero", 2, {
        "variants": "zero1", "torch_zero1": True, "reference": True,
        "steps": STEPS}, timeout=240,
        run_dir=tmp_path_factory.mktemp("zero_redundancy"))


@pytest.mark.distributed
def test_losses_equal_the_one_process_reference(ranks):
    run = ranks[0]["runs"]["torch_zero1"]
    assert run["losses"] == pytest.approx(ranks[0]["reference"], rel=1e-6)


@pytest.mark.distributed
def test_each_rank_holds_the_adam_state_of_its_share(ranks):
    psi = ranks[0]["params"]
    owned = ranks[0]["runs"]["torch_zero1"]["owned_numels"]
    assert sum(owned) == psi and all(owned)
    for r in ranks:
        got = r["runs"]["torch_zero1"]["bytes_after_step"]
        assert got["optimizer"] == 8 * owned[r["rank"]]
        assert got["grads"] == 4 * psi           # DDP: full gradients
    per_rank = ledger(psi, 2, "zero1", precision="fp32").optimizer_gpu
    worst = max(8 * n for n in owned)
    assert 1 <= worst / per_rank < 1.5           # whole parameters


@pytest.mark.distributed
def test_ddp_all_reduces_and_the_owners_broadcast(ranks):
    comm = ranks[0]["runs"]["torch_zero1"]["comm"]
    psi = ranks[0]["params"]
    assert comm["all_reduce"]["bytes"] >= 4 * psi
    assert comm["broadcast"]["bytes"] == 4 * psi
