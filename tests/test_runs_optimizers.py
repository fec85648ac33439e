"""labkit.runs.optimizers on 2 gloo ranks under FSDP2: every optimizer's
state per rank is the ledger's to the byte, Muon's collectives are the
ones predicted, and the sharded Muon ends where one process's Muon does."""
import pytest

from labkit.launch import launch
from labkit.predict import optimizers as O

pytestmark = pytest.mark.distributed
WORLD = 2


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return launch("labkit.runs.optimizers", WORLD, {
        "steps": 2, "reference": True,
        "optimizers": "adamw,adafactor,adamw8bit"}, timeout=180,
        run_dir=tmp_path_factory.mktemp("optimizers"))


def test_state_bytes_per_rank_are_the_ledgers(ranks):
    tensors = O.gpt_tensors(2, 64, 256, 32)
    for r in ranks:
        for name, run in r["runs"].items():
            opt = name.split("_")[0]
            assert run["state"] == O.state_bytes(opt, tensors, WORLD), name


def test_muon_collectives_are_counted_as_predicted(ranks):
    tensors = O.gpt_tensors(2, 64, 256, 32)
    for r in ranks:
        for mode in O.MUON_MODES:
            run = r["runs"][f"muon_{mode}"]
            assert run["collectives"] == O.muon_traffic(
                tensors, WORLD, mode)["ops"]
        assert r["runs"]["adamw"]["collectives"] == {}


def test_sharded_muon_ends_near_one_process_and_ranks_agree(ranks):
    a, b = ranks
    for mode in O.MUON_MODES:
        run = a["runs"][f"muon_{mode}"]
        assert run["max_abs_diff"] < 1e-3      # bf16 Newton-Schulz
        assert run["losses"] == b["runs"][f"muon_{mode}"]["losses"]
    assert a["runs"]["muon_gather"]["losses"] == \
        a["runs"]["muon_dealt"]["losses"]
