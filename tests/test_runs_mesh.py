"""FSDP2 x TP on a 2-D mesh (4 gloo ranks) against one process and the
ledger: losses, first-step gradients, parameter bytes per rank, bytes per
mesh dimension."""
import pytest

from labkit.launch import launch
from labkit.predict import mesh as M

pytestmark = pytest.mark.distributed

SHAPE = dict(vocab=256, seq=32, layers=2, hidden=64)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return launch("labkit.runs.mesh", 4, {"layouts": "2x2,2x2+sp,1x4",
                                          "steps": 3}, timeout=300,
                  run_dir=tmp_path_factory.mktemp("mesh"))


def test_losses_equal_one_process(ranks):
    for lay in ranks[0]["results"]:
        assert lay["losses"] == pytest.approx(lay["reference_losses"],
                                              rel=1e-5), lay["name"]


def test_gradients_equal_one_process(ranks):
    # the GPT's 2-D (_StridedShard, Shard) biases made whole; its key
    # bias, whose true gradient is zero, judged on the model's scale
    for r in ranks:
        for lay in r["results"]:
            assert lay["grad_rel_diff"] < 1e-5, (lay["name"],
                                                 lay["grad_rel_diff"])


def test_parameter_bytes_are_the_ledger(ranks):
    for r in ranks:
        for lay in r["results"]:
            assert lay["param_bytes"] == M.rank_param_bytes(
                **SHAPE, dp=lay["dp"], tp=lay["tp"]), lay["name"]


def test_bytes_per_mesh_dimension_are_predicted(ranks):
    for r in ranks:
        for lay in r["results"]:
            pred = M.step_comm(**SHAPE, dp=lay["dp"], tp=lay["tp"],
                               micro_batch=lay["local_micro_batch"],
                               sequence_parallel=lay["sp"])
            assert lay["comm"]["tp"] == pred["tp"], lay["name"]
            assert lay["comm"]["dp"] == pred["dp"], lay["name"]
            assert lay["comm"]["other"] == {}, lay["name"]


def test_bad_layout_is_refused_before_launch():
    from labkit.runs.mesh import parse_layout
    with pytest.raises(ValueError):
        parse_layout("2x3", 4)
    with pytest.raises(ValueError):
        parse_layout("2by2", 4)
    assert parse_layout("2x2+sp", 4) == {"dp": 2, "tp": 2, "sp": True,
                                         "name": "2x2+sp"}
