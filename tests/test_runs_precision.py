"""labkit.runs.precision on 2 gloo ranks, small: the bytes exactly as the
ledger says, the FP8 all-gather half of bf16's, the reductions against
fp64, the scalers agreeing on every rank."""
from __future__ import annotations

import pytest

from labkit import arch
from labkit.launch import launch
from labkit.predict.model import params as PP
from labkit.predict import precision as P


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return launch("labkit.runs.precision", 2, {
        "hidden": 128, "ffn": 256, "micro_batch": 4, "ks": [1, 2, 8],
        "scaler_steps": 3, "init_scale": 2.0 ** 22, "growth_interval": 1,
        "parts": "local,dist,deepspeed"},
        timeout=240, run_dir=tmp_path_factory.mktemp("precision"))


def _rec():
    base = arch.preset("llama-tiny")
    return base.with_(hidden=128, ffn=256, head_dim=32)


def test_bytes_equal_the_ledger(ranks):
    rec = _rec()
    psi = PP.total(rec)
    b = P.recipe_bytes("fsdp2_bf16", 2)
    for r in ranks:
        fs = r["fsdp2_bf16"]
        for term in ("params", "grads", "optimizer"):
            assert fs["held"][term] == b[term] * psi
        assert fs["forward"]["all_gather"]["bytes"] == 2 * psi
        assert fs["forward"]["all_gather"]["dtypes"] == ["bfloat16"]
        assert fs["backward"]["reduce_scatter"]["bytes"] == 4 * psi
        assert fs["backward"]["reduce_scatter"]["dtypes"] == ["float32"]
        ds = P.recipe_bytes("deepspeed_bf16", 2)
        for term in ("params", "grads", "optimizer"):   # 2 + 2 + 12
            assert r["deepspeed_bf16"]["held"][term] == ds[term] * psi
        assert r["deepspeed_bf16"]["param_dtype"] == "torch.bfloat16"
    ac = ranks[0]["autocast"]
    assert ac["weight_cast_bytes"] == 2 * PP.matmul_params(rec)
    assert ac["dtypes"] == ["bf16"]


def test_fp8_all_gather_is_half_of_bf16(ranks):
    for r in ranks:
        ag = r["fp8_all_gather"]
        assert ag["fp8"]["all_gather"]["dtypes"] == ["uint8"]
        assert 2 * ag["fp8"]["all_gather"]["bytes"] == \
            ag["bf16"]["all_gather"]["bytes"]
        assert ag["rel_error"]["bf16"] < ag["rel_error"]["fp8"] < 0.1


def test_reductions_against_fp64(ranks):
    r0 = ranks[0]
    for a in r0["accumulation"] + r0["all_reduce"]:
        n = a.get("k") or a["ranks"]
        bound = P.sum_error_bound(n, a["format"]) + P.store_error(a["format"])
        assert a["rel_error"] <= bound
    err = {(a["format"], a["ranks"]): a["rel_error"] for a in r0["all_reduce"]}
    assert err[("fp32", 2)] < 1e-6 < err[("bf16", 2)]
    formats = r0["formats"]
    assert formats["e4m3"]["max"] == 448.0


def test_scalers_skip_on_overflow_and_agree(ranks):
    for key in ("grad_scaler",):
        tr = ranks[0][key]
        assert tr[0]["skipped"] and tr[1]["scale"] == tr[0]["scale"] / 2
    scales = {tuple(s["scale"] for s in r["sharded_scaler"]) for r in ranks}
    assert len(scales) == 1
    # bf16 never underflows the step's gradients; fp16 unscaled may
    uf = {(u["tensors"], u["format"], u["scale"]): u["zero"]
          for u in ranks[0]["underflow"]}
    assert uf[("activation_grads", "bf16", 1.0)] == 0
