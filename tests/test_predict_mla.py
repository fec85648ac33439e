"""MLA: the ledger against the saved tensors of a real block (to the
byte), and DeepSeek-V3's cache against DeepSeek-V2's Table 1."""
import pytest

from labkit.measure import mla as M
from labkit.predict.model import mla as P
from labkit.predict.model.arch import preset
from labkit.predict.model.moe_presets import preset as moe_preset

SHAPES = [
    P.Shape(batch=1, seq=16, hidden=64, heads=4, q_lora_rank=24,
            kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4,
            v_head_dim=8),
    # DeepSeek-V3's proportions, scaled down: 192-wide q/k, 128-wide v
    P.Shape(batch=2, seq=32, hidden=112, heads=2, q_lora_rank=24,
            kv_lora_rank=8, qk_nope_head_dim=16, qk_rope_head_dim=8,
            v_head_dim=16),
]


@pytest.mark.parametrize("m", SHAPES)
def test_ledger_matches_the_saved_tensors_to_the_byte(m):
    got = M.measure(m)
    rows = P.saved(m)
    assert got["total"] == P.total(rows)
    assert sorted(b for _, b in rows) == [b for b, _ in got["tensors"]]


def test_deepseek_v3_cache_is_nine_halves_of_a_head():
    a = moe_preset("deepseek-v3")
    assert P.cache_elems(a) == 512 + 64 == 9 * a.qk_nope_head_dim // 2
    assert P.head_kv_elems(a) == 128 * (192 + 128)
    assert P.from_arch(a, 1, 8).qk_head_dim == 192


def test_gqa_cache_and_bad_shapes():
    assert P.gqa_cache_elems(preset("llama3-8b")) == 2 * 8 * 128
    with pytest.raises(ValueError, match="no MLA"):
        P.from_arch(preset("llama3-8b"), 1, 8)
    with pytest.raises(ValueError, match="fused path"):
        P.Shape(1, 8, 16, 2, 8, 8, 4, 4, 8)
    with pytest.raises(ValueError, match="positive"):
        P.Shape(0, 8, 16, 2, 8, 8, 4, 4, 4)
