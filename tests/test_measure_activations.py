"""The activation ledger against the storages a forward really keeps.

One process, CPU: fp32, bf16 autocast and bf16 weights (FSDP's mixed
precision), for recompute none, full and selective, at two sizes; the
measured tensors equal the ledger's tensor by tensor (dtype, bytes).
"""
import pytest
import torch

from labkit.measure.activations import as_multiset, hooked_bytes, measure
from labkit.nn.model import GPTConfig, batch, build
from labkit.predict import activations as A
from labkit.training.recompute import apply


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


def test_a_buffer_the_backend_still_holds_is_waited_for(monkeypatch):
    """gloo's worker thread drops its reference to a collective's buffer a
    moment after the wait returns (CI: FSDP2's all-gather buffer, once):
    such a storage is given time, and counted only if it stays alive. On a
    clock of the test's own (the buffer goes at 0.05 s), so the budget is
    checked exactly, on a machine of any speed or load."""
    from labkit.measure import activations as MA

    class Clock:
        now = 0.0

        def monotonic(self):
            return self.now

        def sleep(self, s):
            self.now += s
            if self.now >= 0.05:
                held.clear()          # the backend lets go of its buffer

    clock = Clock()
    monkeypatch.setattr(MA, "time", clock)
    # 150 polls on this clock: no full collection each (the buffer's last
    # reference goes with held.clear(), refcounting frees it at once)
    monkeypatch.setattr(MA, "gc", type("NoGC", (), {"collect": staticmethod(
        lambda: 0)}))
    mode = MA._NewStorages(set())
    held = [torch.empty(1000)]
    kept = torch.empty(10)
    for t in (held[0], kept):
        k = MA._key(t)
        mode.seen[k] = (MA.StorageWeakRef(t.untyped_storage()), "fp32",
                        "activation", "empty")
        mode.communicated.add(k)
    MA._settle(mode, skip=-1, settle_s=0.3)
    # `kept` never goes: the whole budget, and not one poll more
    assert 0.3 <= clock.now < 0.3 + 0.0021
    assert mode.seen[MA._key(kept)][0].expired() is False
    assert sum(not ref.expired() for ref, *_ in mode.seen.values()) == 1
