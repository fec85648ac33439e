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


def test_states_per_rank_are_the_ledger(ranks):
    """DDP dense part whole, E / ep experts, fp32 Adam: 16 bytes each."""
    from labkit.predict.model import params as P
    from labkit.predict.model.params_moe import moe_counts
    from labkit.runs.experts import parser, record
    a = record(parser().parse_args(["--hidden", str(H)]))
    routed = a.moe_layers * moe_counts(a)["routed_layer"]
    want = X.states_per_rank(P.count(a)["total"], routed, 2, 4)
    for r in ranks:
        for steps in r["balance"].values():
            got = steps[-1]["states"]
            assert got["numel"] == want["parameters"]
            for k in ("params", "grads", "optimizer"):
                assert got[k] == want[k], k


def test_activations_per_rank_are_the_ledger(ranks):
    """Each EP rank keeps its router's tensors for its own tokens and its
    experts' for the rows it received: the ledger, to the byte."""
    from collections import Counter

    from labkit.predict.activations import moe as AM
    from labkit.runs.experts import parser, record
    a = record(parser().parse_args(["--hidden", str(H)]))
    received = []
    for r in ranks:
        act = r["activations"]
        routed = [(s, list(got)) for s, got in act["routed"]]
        pred = AM.ep_decoder_saved(a, 16, act["micro_batch"], routed)
        assert Counter((e.dtype, e.bytes) for e in pred) == Counter(
            (t[0], t[1]) for t in act["tensors"])
        assert act["total"] == AM.total(pred)
        received.append(sum(sum(got) for _, got in routed))
    assert sum(received) == 4 * 2 * 2 * 16 * 2   # W x layers x b x s x k
