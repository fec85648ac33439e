"""labkit.measure.precision: torch.finfo equals the formats' bit layout,
scaled casts against a loop over the groups, underflow counted."""
from __future__ import annotations

import pytest
import torch

from labkit.measure import precision as M
from labkit.predict import precision as P


def test_torch_finfo_equals_the_bit_layout():
    for name, got in M.formats().items():
        want = P.format_facts(name)
        for k in ("bits", "max", "eps", "smallest_normal",
                  "smallest_subnormal"):
            assert got[k] == want[k], (name, k)


def _reference(x, rows, cols, fmt):
    """One group at a time: the definition, written as a loop."""
    dt = M.DTYPES[fmt]
    out = torch.empty_like(x)
    for i in range(0, x.shape[0], rows):
        for j in range(0, x.shape[1], cols):
            g = x[i:i + rows, j:j + cols]
            s = g.abs().max() / torch.finfo(dt).max
            out[i:i + rows, j:j + cols] = (g / s).to(dt).float() * s
    return out


@pytest.mark.parametrize("scaling", M.SCALINGS)
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_quantize_equals_the_group_loop(scaling, fmt):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 96, generator=g) * torch.logspace(
        -3, 2, 96).unsqueeze(0)
    block = 32
    rows, cols = {"tensorwise": (64, 96), "rowwise": (1, 96),
                  "tile": (1, block), "block": (block, block)}[scaling]
    assert torch.equal(M.quantize(x, scaling, fmt, block),
                       _reference(x, rows, cols, fmt))


def test_finer_scaling_keeps_an_outlier_from_costing_the_rest():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 256, generator=g)
    x[0, 0] = 1e4     # one outlier: tensorwise crushes every other value
    err = {s: M.rel_error(M.quantize(x[1:], s, "e4m3", 128), x[1:])
           for s in ("tensorwise",)}
    full = {s: M.rel_error(M.quantize(x, s, "e4m3", 128)[1:], x[1:])
            for s in M.SCALINGS}
    assert full["tile"] < full["block"] < full["tensorwise"]
    assert full["rowwise"] == pytest.approx(err["tensorwise"], rel=0.5)
    with pytest.raises(ValueError, match="tiles"):
        M.quantize(torch.ones(4, 100), "tile", "e4m3", 128)


def test_underflow_counts_zeros_and_scaling_fixes_them():
    t = torch.tensor([1e-9, 1e-6, 1e-3, 1.0, 0.0])
    u = M.underflow([t], torch.float16)
    assert u["nonzero"] == 4 and u["zero"] == 0.25   # 1e-9 < 2^-24
    assert u["subnormal"] == 0.25                   # 1e-6 < 2^-14
    assert M.underflow([t], torch.float16, 2.0 ** 16)["zero"] == 0
    assert M.underflow([t], torch.bfloat16)["zero"] == 0
    assert M.underflow([t * 1e5], torch.float16)["overflow"] == 0.25


def test_fp8_matmul_error_between_bf16_and_nothing():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(128, 256, generator=g), torch.randn(128, 256,
                                                           generator=g)
    ref = x.double() @ w.double().T
    e8 = M.rel_error(M.fp8_matmul(x, w, "block"), ref)
    e16 = M.rel_error(x.bfloat16() @ w.bfloat16().T, ref)
    assert e16 < e8 < 0.1
