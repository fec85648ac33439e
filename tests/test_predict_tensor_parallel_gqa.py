"""TP with KV heads: the split sums back to the layer, and TP > KV heads
replicates K/V (bytes said)."""
import pytest

from labkit import arch
from labkit.predict.model import params as P
from labkit.predict import tensor_parallel as TP
from labkit.predict.tensor_parallel.gqa import kv_split, layer_params


@pytest.mark.parametrize("name", ["llama3-8b", "llama3.1-405b",
                                  "llama-tiny"])
@pytest.mark.parametrize("tp", [1, 2])
def test_split_sums_to_the_layer(name, tp):
    a = arch.preset(name)
    one = P.count(a)["per_layer"]
    lp = layer_params(a, tp)
    assert lp["sharded"] * tp + lp["replicated"] == one
    assert lp["kv_replicated_bytes16"] == 0


def test_gpt_layer_is_megatrons():
    a = arch.preset("gpt-tiny")
    for tp in (1, 2, 4):
        want = TP.layer_params(a.hidden, tp)
        got = layer_params(a, tp)
        assert got["total"] == want["total"] and \
            got["replicated"] == want["replicated"]


def test_tp_above_kv_heads_replicates_kv():
    a = arch.preset("llama3-70b")              # 8 KV heads
    assert kv_split(a, 8) == {"kv_heads_per_rank": 1, "replicas": 1}
    assert kv_split(a, 16) == {"kv_heads_per_rank": 1, "replicas": 2}
    lp = layer_params(a, 16)
    h, d = a.hidden, a.head_dim
    assert lp["kv_replicated_bytes16"] == 2 * (2 * h * d - 2 * h * 8 * d
                                               // 16)
    with pytest.raises(ValueError, match="KV heads"):
        kv_split(a.with_(kv_heads=4, heads=12), 3)
    with pytest.raises(ValueError, match="attention heads"):
        kv_split(a, 3)
