"""Ring and Ulysses attention at 2 and 4 gloo ranks against full attention:
outputs and gradients (causal and not), bytes, activations, causal load."""
import pytest

from labkit.launch import launch
from labkit.measure.collectives import added
from labkit.predict import context_parallel as CP

pytestmark = pytest.mark.distributed

B, S, HEADS, D = 2, 64, 4, 16
TOL = 1e-5


@pytest.fixture(scope="module", params=[2, 4])
def ranks(request, tmp_path_factory):
    n = request.param
    return n, launch("labkit.runs.context_parallel", n, {
        "batch": B, "seq": S, "heads": HEADS, "head_dim": D,
        "torch_cp": n == 2}, timeout=240,
        run_dir=tmp_path_factory.mktemp(f"cp{n}"))


def counted(x) -> dict:
    """Calls and bytes of each collective, forward and backward added."""
    return added(x["comm_forward"], x["comm_backward"])


def test_equal_full_attention(ranks):
    _, rs = ranks
    for r in rs:
        for x in r["results"]:
            assert x["out_diff"] <= TOL * x["scale"], x
            assert x["grad_diff"] <= TOL * 10, x


def test_bytes_are_predicted(ranks):
    n, rs = ranks
    for r in rs:
        for x in r["results"]:
            got = counted(x)
            want = (CP.ulysses_bytes if x["method"] == "ulysses"
                    else CP.ring_bytes)(B, S, HEADS * D, n, 4)
            assert got == want, x["method"]


def test_activations_per_rank_divide_by_cp(ranks):
    n, rs = ranks
    want = CP.saved_bytes(B, S, HEADS * D, HEADS, n)
    assert want * n == CP.saved_bytes(B, S, HEADS * D, HEADS, 1)
    for r in rs:
        for x in r["results"]:
            assert x["saved_bytes"] == want, x["method"]


def test_causal_load_contiguous_vs_balanced(ranks):
    n, rs = ranks
    for method, balanced in (("ring", False), ("ring_balanced", True)):
        got = [next(x for x in r["results"] if x["method"] == method
                    and x["causal"])["pairs"] for r in rs]
        assert got == CP.causal_work(n, balanced, S)
    assert CP.imbalance(CP.causal_work(n, True, S)) == 1.0


def test_torch_context_parallel_recorded(ranks):
    n, rs = ranks
    if n == 2:   # "ok" where PyTorch supports it; on CPU it says why not
        assert rs[0]["torch_context_parallel"]


# grouped-query attention: 4 query heads, 2 K/V heads; Ulysses where
# p <= KV heads (p = 2), the ring at p = 2 and 4
KV = 2


@pytest.fixture(scope="module", params=[2, 4])
def gqa(request, tmp_path_factory):
    n = request.param
    methods = "ring,ring_balanced" + (",ulysses" if KV % n == 0 else "")
    return n, launch("labkit.runs.context_parallel", n, {
        "batch": B, "seq": S, "heads": HEADS, "kv_heads": KV,
        "head_dim": D, "methods": methods}, timeout=240,
        run_dir=tmp_path_factory.mktemp(f"gqa{n}"))


def test_gqa_equals_full_attention_and_its_bytes(gqa):
    n, rs = gqa
    kv_hidden = KV * D
    want_saved = CP.saved_bytes(B, S, HEADS * D, HEADS, n, 4,
                                kv_hidden=kv_hidden)
    for r in rs:
        assert {x["method"] for x in r["results"]} == (
            {"ring", "ring_balanced"} | ({"ulysses"} if n == 2 else set()))
        for x in r["results"]:
            assert x["out_diff"] <= TOL * x["scale"], x
            assert x["grad_diff"] <= TOL * 10, x
            got = counted(x)
            if x["method"] == "ulysses":
                want = CP.ulysses_bytes(B, S, HEADS * D, n, 4,
                                        kv_hidden=kv_hidden, kv_heads=KV)
            else:
                want = CP.ring_bytes(B, S, HEADS * D, n, 4,
                                     kv_hidden=kv_hidden)
                mha = CP.ring_bytes(B, S, HEADS * D, n, 4)
                assert got["send"]["bytes"] * HEADS == (
                    mha["send"]["bytes"] * KV)
            assert got == want, x["method"]
            assert x["saved_bytes"] == want_saved, x["method"]
