"""labkit.predict.mesh.arch: the mesh ledger read from a record. On the GPT
preset it is labkit.predict.mesh shape for shape and byte for byte; on
Llama 3 it splits the 8 KV heads and keeps the 128K embedding and head
whole in "tp"."""
import pytest

from labkit.predict.model import arch as A
from labkit.predict import mesh as M
from labkit.predict.mesh import arch as MA
from labkit.predict.model import params as P


@pytest.mark.parametrize("dp,tp", [(1, 1), (2, 2), (4, 1), (1, 4), (2, 4)])
def test_gpt_preset_equals_the_positional_mesh(dp, tp):
    V, s, L, h = 256, 32, 2, 64
    a = A.gpt(L, h, 4, V, s)
    assert MA.unit_shapes(a, tp) == M.unit_shapes(V, s, L, h, tp)
    assert MA.rank_param_bytes(a, dp, tp) == M.rank_param_bytes(
        V, s, L, h, dp, tp)
    assert MA.fsdp_rank_param_bytes(a, dp, tp) == M.fsdp_rank_param_bytes(
        V, s, L, h, dp, tp)
    for sp in (False, True):
        assert MA.step_comm(a, s, dp, tp, 4, sp) == M.step_comm(
            V, s, L, h, dp, tp, 4, sp)


def test_llama3_8b_on_a_node():
    a = A.preset("llama3-8b")
    assert MA.rank_param_bytes(a, 1, 1, 1) == P.total(a)
    # tp 8: one K and one V head of 128 per rank, Q 4096 / 8
    block = MA.unit_shapes(a, 8)[1]
    assert (512, 4096) in block and (128, 4096) in block
    assert (1792, 4096) in block and (4096, 1792) in block   # SwiGLU / 8
    # every layer's matrices split by 8; embedding, head and norms whole
    whole = 2 * 128256 * 4096 + (2 * 32 + 1) * 4096
    split = P.total(a) - whole
    assert MA.rank_param_bytes(a, 1, 8, 1) == split / 8 + whole
    c = MA.step_comm(a, 4096, 2, 4, 1, True, 2)
    # two RMSNorm weights per layer: 2 partial-sum all-reduces of h
    lam = M.step_comm(128256, 4096, 32, 4096, 2, 4, 1, True, 2)
    assert c["tp"]["all_reduce"]["calls"] == 2 * 32
    assert c["tp"]["all_gather"] == lam["tp"]["all_gather"]


def test_tp_above_kv_heads_replicates_one_head():
    a = A.preset("llama-tiny")              # 4 heads, 2 KV heads of 16
    block = MA.unit_shapes(a, 4)[1]
    assert block[1] == (16, 64) and block[2] == (16, 64)   # q, k
    with pytest.raises(ValueError):
        MA.unit_shapes(a, 3)


@pytest.mark.parametrize("name", ["qwen3-8b", "qwen3-0.6b",
                                  "qwen3-tiny-default-head-dim"])
def test_qwen3_qk_norms_are_held_whole_on_every_rank(name):
    a = A.from_hf_config(f"tests/data/hf_configs/{name}.json")
    assert a.qk_norm
    # one rank, no split: every parameter of the record, Q/K norms in
    assert MA.rank_param_bytes(a, 1, 1, 1) == P.total(a)
    tp = max(a.kv_heads, 2)
    block = MA.unit_shapes(a, tp)[1]
    assert block.count((a.head_dim,)) == 2        # q_norm, k_norm whole
    no_norms = A.Arch(**{**a.__dict__, "qk_norm": False})
    assert (MA.rank_param_bytes(a, 2, tp, 1)
            - MA.rank_param_bytes(no_norms, 2, tp, 1)) \
        == a.layers * 2 * a.head_dim / 2
    c, c0 = (MA.step_comm(x, 64, 1, tp, 1) for x in (a, no_norms))
    ar, ar0 = (x["tp"].get("all_reduce", {"calls": 0, "bytes": 0})
               for x in (c, c0))
    assert ar["calls"] - ar0["calls"] == 2 * a.layers
    assert ar["bytes"] - ar0["bytes"] == 2 * a.layers * a.head_dim * 4


def test_kv_copies_are_priced_when_tp_exceeds_kv_heads():
    a = A.preset("llama-tiny")      # 2 layers, h 64, 2 KV heads of 16
    assert MA.kv_grad_comm(a, 1, 2) == {}
    assert MA.kv_replica_bytes(a, 1, 2) == 0
    # tp 4: every K and V head on 2 ranks; per layer K and V, 16 x 64
    assert MA.kv_grad_comm(a, 1, 4) == {"all_reduce": {
        "calls": 4, "bytes": 2 * 2 * 16 * 64 * 4}}
    assert MA.kv_grad_comm(a, 2, 4)["all_reduce"]["bytes"] == \
        2 * 2 * 16 * 64 * 4 / 2                 # the dp shard, after FSDP
    # a rank holds one head (16 rows) where a 1/4 share is 8 rows
    assert MA.kv_replica_bytes(a, 1, 4) == 2 * 2 * (16 - 8) * 64 * 4
    c = MA.step_comm(a, 32, 1, 4, 4)["tp"]["all_reduce"]
    assert c["calls"] == 4 * 2 + 4      # 4 per layer (Megatron) + K/V
