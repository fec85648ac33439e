"""labkit.predict.precision: formats from their bits against the published
tables, recipes against chapter 1's ledger, the FP8 ledger's sums."""
from __future__ import annotations

import pytest

from labkit import arch
from labkit.predict import memory
from labkit.predict.model import params
from labkit.predict import precision as P


@pytest.mark.parametrize("name,top,normal,sub,eps", [
    # Micikevicius et al. 2022, Table 1 (E4M3, E5M2); IEEE 754 binary16
    ("e4m3", 448.0, 2.0 ** -6, 2.0 ** -9, 2.0 ** -3),
    ("e5m2", 57344.0, 2.0 ** -14, 2.0 ** -16, 2.0 ** -2),
    ("fp16", 65504.0, 2.0 ** -14, 2.0 ** -24, 2.0 ** -10),
    ("bf16", (2 - 2.0 ** -7) * 2.0 ** 127, 2.0 ** -126, 2.0 ** -133,
     2.0 ** -7),
    ("fp32", (2 - 2.0 ** -23) * 2.0 ** 127, 2.0 ** -126, 2.0 ** -149,
     2.0 ** -23),
])
def test_formats_from_bits_equal_the_published_values(name, top, normal,
                                                      sub, eps):
    f = P.format_facts(name)
    assert (f["max"], f["smallest_normal"], f["smallest_subnormal"],
            f["eps"]) == (top, normal, sub, eps)


def test_unknown_format_and_recipe_are_one_line():
    with pytest.raises(ValueError, match="unknown format 'fp4'"):
        P.format_facts("fp4")
    with pytest.raises(ValueError, match="unknown recipe"):
        P.recipe_bytes("int8")


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_recipes_are_the_ledger(gpus):
    psi = 1e9
    for recipe, (prec, strategy, kw) in {
            "fp32": ("fp32", "ddp", {}),
            "autocast_bf16": ("fp32", "ddp", {}),
            "fsdp2_bf16": ("fp32", "zero3", {}),
            "fp8": ("fp32", "zero3", {}),
            "deepspeed_bf16": ("mixed", "zero3", {}),
            "megatron_bf16": ("mixed", "zero3", {"fp32_grads": True}),
    }.items():
        b = P.recipe_bytes(recipe, gpus)
        led = memory.ledger(psi, gpus, strategy, precision=prec, **kw)
        assert b["states"] * psi == pytest.approx(led.gpu_total), recipe
    assert P.recipe_bytes("fp8", 4)["gather"] * 2 == \
        P.recipe_bytes("fsdp2_bf16", 4)["gather"]


def test_sum_bound_grows_with_n_and_precision():
    assert P.sum_error_bound(1, "bf16") == 0
    assert P.sum_error_bound(33, "bf16") == pytest.approx(
        32 * 2.0 ** -8 / (1 - 32 * 2.0 ** -8))
    assert P.sum_error_bound(64, "fp32") < P.sum_error_bound(64, "bf16")
    with pytest.raises(ValueError):
        P.sum_error_bound(0, "fp32")


def test_fp8_ledger_llama3_8b():
    a = arch.preset("llama3-8b")
    L = P.fp8_ledger(a, gpus=8, seq=8192)
    assert L["params"] == params.total(a)
    # what runs in FP8: the layers' projections, not the output head
    assert L["fp8_params"] == params.matmul_params(a) - a.vocab * a.hidden
    assert L["states_per_rank"] == L["states_bf16_per_rank"] == \
        16 * L["params"] / 8
    assert L["gather_bytes"]["fp8"] < L["gather_bytes"]["bf16"]
    assert L["saved_linear_inputs"]["fp8"] * 2 == \
        L["saved_linear_inputs"]["bf16"]
    assert 0.5 < L["fp8_share"] < 1 and 1 < L["speedup_bound"] < 2
