"""labkit.predict.mesh_arch: the mesh ledger read from a record. On the GPT
preset it is labkit.predict.mesh shape for shape and byte for byte; on
Llama 3 it splits the 8 KV heads and keeps the 128K embedding and head
whole in "tp"."""
import pytest

from labkit.predict import arch as A
from labkit.predict import mesh as M
from labkit.predict import mesh_arch as MA
from labkit.predict import params as P


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
