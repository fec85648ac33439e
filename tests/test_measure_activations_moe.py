"""The MoE block's activation ledger (labkit.predict.activations.moe)
against the storages a forward of the MoE decoder really keeps (one
process, CPU): fp32, bf16 autocast and bf16 weights; dropless and with a
capacity; shared experts, dense first layers, sigmoid routers, top-1;
the dense ledger's variants and gpt-oss's expert biases around and in
the experts; tensor by tensor (dtype, bytes), given the router's own counts."""
from collections import Counter
from pathlib import Path

import pytest
import torch

from labkit import arch
from labkit.measure import activations_moe as MM
from labkit.nn.model import GPTConfig, batch, build_arch
from labkit.predict import activations as A
from labkit.predict.activations import arch as AA
from labkit.predict.activations import moe as AM

TINY = arch.preset("llama-tiny").with_(experts=4, top_k=2, expert_ffn=32,
                                       layers=2)
ARCHS = [TINY,
         TINY.with_(shared_experts=1, first_dense_layers=1, layers=3),
         TINY.with_(experts=8, top_k=1, router="sigmoid",
                    routed_scaling=2.5, norm_topk=False)]


def _run(a, precision, factor, b=4, s=16):
    model = build_arch(a, seed=0)
    if precision == "fsdp_bf16":
        model = model.to(torch.bfloat16)
    for m in model.blocks[a.first_dense_layers:]:
        m.mlp.capacity_factor = factor
    amp = (torch.autocast("cpu", dtype=torch.bfloat16)
           if precision == "autocast_bf16" else None)
    x, y = batch(GPTConfig(vocab=a.vocab, seq=s), b, 0)
    got = MM.measure(model, x, y, amp)
    return got, AM.saved(a, s, b, MM.router_counts(model), precision)


@pytest.mark.parametrize("precision", A.PRECISIONS)
@pytest.mark.parametrize("factor", [None, 1.0])
def test_ledger_equals_measured(precision, factor):
    for a in ARCHS:
        got, pred = _run(a, precision, factor)
        assert Counter(t[:2] for t in got["tensors"]) == Counter(
            (e.dtype, e.bytes) for e in pred), (a, precision, factor)
        assert got["total"] == AM.total(pred)
        assert got["weight_cast"] == AM.total(pred, "weight_cast")
        got["loss"].backward()


def test_drops_shrink_what_is_kept():
    full, _ = _run(TINY, "fp32", None)
    dropped, _ = _run(TINY, "fp32", 1.0)
    assert dropped["total"] < full["total"]


def test_routed_part_grows_with_assignments_not_experts():
    a = TINY
    even = AM.moe_saved(a, 64, [32, 32, 32, 32])
    hot = AM.moe_saved(a, 64, [128, 0, 0, 0])
    assert AM.total(even) == AM.total(hot)
    f, h = a.expert_ffn, a.hidden   # K (3 h + 4 f) fp32, 3 per-row ids
    assert AM.total(even) - AM.router_bytes(a, 64) == (
        128 * (3 * h + 4 * f) * 4 + 128 * (8 + 8 + 4))


def test_bad_input():
    with pytest.raises(ValueError, match="counts"):
        AM.moe_saved(TINY, 64, [1, 2, 3])
    with pytest.raises(ValueError, match="MoE"):
        AM.moe_saved(arch.preset("llama-tiny"), 64, [1])
    with pytest.raises(ValueError, match="one entry per MoE layer"):
        AM.saved(TINY, 16, 4, [[1, 1, 1, 1]])


def test_per_head_qk_norms_in_an_moe_block():
    """Qwen3-MoE's per-head q/k norms: the dense ledger's attention
    (labkit.predict.activations.block) inside the MoE block, measured."""
    a = TINY.with_(qk_norm=True)
    for precision in A.PRECISIONS:
        got, pred = _run(a, precision, None, b=2, s=8)
        assert Counter(t[:2] for t in got["tensors"]) == Counter(
            (e.dtype, e.bytes) for e in pred), precision


FAM = Path(__file__).resolve().parent / "data" / "hf_configs_families"
# gpt-oss at two tiny layers: sinks, a local layer, router and expert
# biases, attention biases (its own record, shrunk)
OSS = arch.from_hf_config(FAM / "gpt-oss-20b.json").with_(
    layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, vocab=256,
    max_seq=32, ffn=32, experts=4, top_k=2, expert_ffn=32, window=4,
    window_layers=(0,))
# the dense ledger's other variants around (and inside) the experts
MOE_VARIANTS = [
    OSS,
    TINY.with_(post_norms=True, mlp="geglu", mlp_fused=True,
               qkv_fused=True, qk_norm=True, attn_softcap=50.0,
               logit_softcap=30.0, shared_experts=1),
    TINY.with_(norm="layernorm", mlp="gelu", parallel=True,
               rotary_fraction=0.5, head_bias=True, layers=3,
               first_dense_layers=1, window=4, window_layers=(0,)),
    TINY.with_(pre_norms=False, post_norms=True, kv_heads=1,
               qk_norm=True, qk_norm_full=True),
]


@pytest.mark.parametrize("precision", A.PRECISIONS)
def test_dense_variants_and_expert_biases_in_an_moe_block(precision):
    """gpt-oss (sinks, window, expert_bias) and the dense ledger's other
    variants (labkit.predict.activations.block) inside MoE blocks, and
    GeGLU, fused and GELU experts: the block's measured storages."""
    for a in MOE_VARIANTS:
        got, pred = _run(a, precision, None, b=2, s=8)
        assert Counter(t[:2] for t in got["tensors"]) == Counter(
            (e.dtype, e.bytes) for e in pred), (a.name, precision)
        assert got["weight_cast"] == AM.total(pred, "weight_cast")


def test_what_the_moe_ledger_does_not_cover_is_named():
    oss = arch.from_hf_config(FAM / "gpt-oss-20b.json")
    kept = [[4 * 16 // oss.experts] * oss.experts] * oss.moe_layers
    assert AM.total(AM.saved(oss, 16, 1, kept, "fsdp_bf16")) > 0
    with pytest.raises(ValueError, match="sigmoid gate"):
        AM.saved(TINY.with_(shared_experts=1, shared_gate=True), 16, 1,
                 [[8] * 4] * 2)
    with pytest.raises(ValueError, match="expert groups"):
        AM.saved(TINY.with_(experts=8, expert_groups=2, group_top_k=1), 16,
                 1, [[4] * 8] * 2)


def test_mla_is_refused_not_read_as_gqa():
    """An MLA record (DeepSeek) is not labkit.nn.decoder's attention: both
    ledgers refuse it in one line rather than size a GQA block."""
    import json
    cfg = json.loads((Path(__file__).resolve().parent / "data"
                      / "hf_configs_moe" / "deepseek-tiny-no-q-lora.json"
                      ).read_text())
    a = arch.from_hf_config(cfg | {"n_group": 1, "topk_group": 1})
    with pytest.raises(ValueError, match="MLA"):
        AM.saved(a, 8, 1, [[1] * a.experts] * a.moe_layers)
    with pytest.raises(ValueError, match="MLA"):
        AA.saved(a.with_(experts=0, top_k=0, shared_experts=0,
                         first_dense_layers=0), 8, 1)
