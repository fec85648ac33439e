"""The Llama-style block's activation ledger against the storages a
forward of labkit.nn.decoder really keeps (one process, CPU): fp32, bf16
autocast and bf16 weights (FSDP's mixed precision), recompute none, full
and selective; tensor by tensor (dtype, bytes)."""
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


@pytest.mark.parametrize("precision", A.PRECISIONS)
@pytest.mark.parametrize("recompute", A.RECOMPUTE)
def test_ledger_equals_measured(precision, recompute):
    for (b, s), a in zip(((4, 32), (3, 16), (2, 8)), ARCHS):
        model = apply(build_arch(a), recompute)
        if precision == "fsdp_bf16":
            model = model.to(torch.bfloat16)
        amp = (torch.autocast("cpu", dtype=torch.bfloat16)
               if precision == "autocast_bf16" else None)
        x, y = batch(GPTConfig(vocab=a.vocab, seq=s), b, 0)
        got = measure(model, x, y, amp)
        pred = AA.saved(a, s, b, precision=precision, recompute=recompute)
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
