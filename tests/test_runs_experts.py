"""labkit.runs.experts on 4 gloo ranks (dp 2 x ep 2): outputs and
gradients = the one-process reference, bytes through every all-to-all =
the prediction from the router's own counts, drops = the histogram's."""
import pytest

from labkit.launch import launch
from labkit.predict import experts as X

H = 32


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return launch("labkit.runs.experts", 4, {
        "ep": 2, "hidden": H, "steps": 2, "aux": 0.01,
        "capacity-factors": "none,1.0,1.25,2.0"},
        run_dir=tmp_path_factory.mktemp("experts"), timeout=300)


def test_equal_to_one_process(ranks):
    for r in ranks:
        for res in r["results"]:
            assert res["out_diff"] <= 1e-5 * res["scale"]
            assert res["dense_grad_diff"] < 1e-6
            assert res["expert_grad_diff"] < 1e-6
            assert res["other_collectives"] == ["all_reduce"]


def test_bytes_are_the_prediction(ranks):
    for rank, r in enumerate(ranks):
        for res in r["results"]:
            for layer in res["layers"]:
                want = X.all_to_all_bytes(layer["kept"], rank % 2, 2, H)
                for k, v in layer["measured"].items():
                    assert v == want[k], (rank, res["capacity_factor"], k)


def test_drops_are_the_histogram(ranks):
    seen = 0
    for rank, r in enumerate(ranks):
        for res in r["results"]:
            for layer in res["layers"]:
                routed = layer["routed"][rank % 2]
                sent = layer["measured"]["dispatch_forward"] // (4 * H)
                dropped = 2 * layer["tokens"] - sent
                assert dropped == X.dropped(routed, layer["capacity"])
                seen += dropped
    assert seen > 0      # capacity 1.0 drops something at these sizes


def test_balance_records_the_load(ranks):
    loads = ranks[0]["balance"]
    assert set(loads) == {"0.0", "0.01"}
    for steps in loads.values():
        assert len(steps) == 2
        assert sum(steps[0]["load"][0]) == 2 * 8 * 16   # k x global tokens
