"""The Llama-style block's activation ledger against the storages a
forward of labkit.nn.decoder really keeps (one process, CPU): fp32, bf16
autocast and bf16 weights (FSDP's mixed precision), recompute none, full
and selective; tensor by tensor (dtype, bytes)."""
from pathlib import Path

import pytest
import torch

from labkit import arch
from labkit.measure.activations import as_multiset, hooked_bytes, measure
from labkit.nn.model import GPTConfig, batch, build_arch
from labkit.predict import activations as A
from labkit.predict.activations import arch as AA
from labkit.training.recompute import apply

ARCHS = [arch.preset("llama-tiny"),                        # GQA 4:2
         arch.preset("llama-tiny").with_(layers=1, kv_heads=1, ffn=96,
                                         qkv_bias=True, out_bias=True,
                                         mlp_bias=True, tied=True),
         arch.preset("llama-tiny").with_(kv_heads=4, head_dim=24)]


def _step(a, b, s, precision, recompute, **kw):
    """The block of ``a`` built at ``precision`` and ``recompute``, its
    batch, its measured step and the ledger's prediction."""
    model = apply(build_arch(a), recompute)
    if precision == "fsdp_bf16":
        model = model.to(torch.bfloat16)
    amp = (torch.autocast("cpu", dtype=torch.bfloat16)
           if precision == "autocast_bf16" else None)
    x, y = batch(GPTConfig(vocab=a.vocab, seq=s), b, 0)
    got = measure(model, x, y, amp, **kw)
    pred = AA.saved(a, s, b, precision=precision, recompute=recompute)
    return model, x, y, amp, got, pred


@pytest.mark.parametrize("precision", A.PRECISIONS)
@pytest.mark.parametrize("recompute", A.RECOMPUTE)
def test_ledger_equals_measured(precision, recompute):
    for (b, s), a in zip(((4, 32), (3, 16), (2, 8)), ARCHS):
        model, x, y, amp, got, pred = _step(a, b, s, precision, recompute)
        assert sorted(t[:2] for t in got["tensors"]) == as_multiset(pred)
        assert got["total"] == A.total(pred)
        assert got["weight_cast"] == A.total(pred, "weight_cast")
        if recompute == "none":
            assert hooked_bytes(model, x, y, amp) == A.total(pred)
        got["loss"].backward()


def test_one_ledger_for_the_gpt_and_not_other_blocks():
    g = arch.preset("gpt-tiny")
    assert AA.saved(g, 32, 2) == A.saved(2, 64, 4, 256, 32, 2)
    with pytest.raises(ValueError, match="Q/K norms"):
        AA.saved(g.with_(qk_norm=True), 32, 2)
    with pytest.raises(ValueError, match="GPT block"):
        AA.saved(g.with_(mlp="swiglu"), 32, 2)


FAM = Path(__file__).resolve().parent / "data" / "hf_configs_families"


def tiny(name, **kw):
    """A published family's record at two tiny layers (its variants
    kept: they are what the ledger is held to)."""
    return arch.from_hf_config(FAM / f"{name}.json").with_(
        layers=2, hidden=64, heads=4, head_dim=16, vocab=256, max_seq=32,
        **kw)


LLAMA = arch.preset("llama-tiny").with_(layers=2)
# every variant the block builds, eight blocks that carry them all
VARIANTS = {
    "sandwich geglu soft-caps window": LLAMA.with_(
        post_norms=True, mlp="geglu", attn_softcap=50.0,
        logit_softcap=30.0, window=4, window_layers=(1,)),
    "post norms only, q/k norm full, window": LLAMA.with_(
        pre_norms=False, post_norms=True, qk_norm=True, qk_norm_full=True,
        window=4, window_layers=(0,)),
    "parallel, partial rotary, head bias, fused": LLAMA.with_(
        parallel=True, rotary_fraction=0.5, head_bias=True,
        qkv_fused=True, mlp_fused=True),
    "sinks, MQA, biases, window, q/k norm": LLAMA.with_(
        sinks=True, kv_heads=1, qkv_bias=True, out_bias=True,
        window=4, window_layers=(0,), qk_norm=True),
    "cross layers skipped, q/k norm per head": LLAMA.with_(
        layers=3, cross_layers=(1,), embed_extra=8, qk_norm=True),
    # Phi-1/2: parallel, partial rotary (0.4), LayerNorm, GELU, head bias
    "phi-2 at two tiny layers": tiny("phi-2", kv_heads=4, ffn=128),
    # Phi-3: fused qkv (one query head per KV head: V a view of it),
    # fused gate_up, a window on every layer
    "phi-3 at two tiny layers": tiny("phi3-mini-4k", kv_heads=4, ffn=96,
                                     window=4, window_layers=(0, 1)),
    "layernorm, gelu, sandwich, window, q/k norm, fused qkv": LLAMA.with_(
        norm="layernorm", mlp="gelu", ffn=128, post_norms=True, window=4,
        window_layers=(1,), qk_norm=True, qkv_fused=True),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variants_ledger_equals_measured(name):
    """Each variant's saved tensors, derived in
    labkit.predict.activations.block, are the block's measured storages,
    tensor by tensor, at every precision and recomputation."""
    a, (b, s) = VARIANTS[name], (2, 8)
    for precision in A.PRECISIONS:
        for recompute in A.RECOMPUTE:
            *_, got, pred = _step(a, b, s, precision, recompute,
                                  settle_s=0.05)
            assert sorted(t[:2] for t in got["tensors"]) == \
                as_multiset(pred), (precision, recompute)
            assert got["weight_cast"] == A.total(pred, "weight_cast")


def test_what_the_ledger_does_not_cover_is_named():
    """A block the ledger has not been held to is refused in one line
    that names what is missing: never a silent number."""
    with pytest.raises(ValueError, match="rmsnorm, learned"):
        AA.saved(arch.preset("gpt-tiny").with_(norm="rmsnorm"), 16, 1)
    with pytest.raises(ValueError, match="experts"):
        AA.saved(arch.from_hf_config(FAM / "gpt-oss-20b.json"), 16, 1)
    for name in ("gemma2-9b", "olmo2-7b", "llama3.2-11b-vision", "phi-2"):
        assert AA.activation_bytes(arch.from_hf_config(
            FAM / f"{name}.json"), 4096, 1, precision="fsdp_bf16") > 0
