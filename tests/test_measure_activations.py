"""The activation ledger against the storages a forward really keeps.

One process, CPU: fp32, bf16 autocast and bf16 weights (FSDP's mixed
precision), for recompute none, full and selective, at two sizes; the
measured tensors equal the ledger's tensor by tensor (dtype, bytes).
"""
import pytest
import torch

from labkit.measure.activations import as_multiset, hooked_bytes, measure
from labkit.model import GPTConfig, batch, build
from labkit.predict import activations as A
from labkit.recompute import apply


@pytest.mark.parametrize("precision", A.PRECISIONS)
@pytest.mark.parametrize("recompute", A.RECOMPUTE)
def test_ledger_equals_measured(precision, recompute):
    for b, c in ((4, GPTConfig()), (3, GPTConfig(seq=16, layers=1))):
        model = apply(build(c), recompute)
        if precision == "fsdp_bf16":
            model = model.to(torch.bfloat16)
        amp = (torch.autocast("cpu", dtype=torch.bfloat16)
               if precision == "autocast_bf16" else None)
        x, y = batch(c, b, 0)
        got = measure(model, x, y, amp)
        pred = A.saved(c.layers, c.hidden, c.heads, c.vocab, c.seq, b,
                       precision=precision, recompute=recompute)
        assert got["total"] == A.total(pred)
        assert sorted(t[:2] for t in got["tensors"]) == as_multiset(pred)
        assert got["weight_cast"] == A.total(pred, "weight_cast")
        if recompute == "none":
            assert hooked_bytes(model, x, y, amp) == A.total(pred)
        got["loss"].backward()   # the kept tensors are enough for backward
