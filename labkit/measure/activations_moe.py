"""Measure what an MoE decoder keeps for backward (twin of
:mod:`labkit.predict.activations.moe`).

    got = measure(model, x, y)            # as labkit.measure.activations
    kept = router_counts(model)           # what the ledger is given

The storages are counted by :func:`labkit.measure.activations.measure`
(every storage the forward creates that is alive after it); this adds
the one dtype the dense blocks never keep (the router's kept mask,
``bool``) and reads, per MoE layer, the router's own kept counts of the
forward just measured -- the ledger's input, as the all-to-all bytes'.
"""
from __future__ import annotations

from labkit.measure import activations as MA
from labkit.nn.moe.layer import moe_blocks


def measure(model, x, y, autocast=None, settle_s: float = 1.0) -> dict:
    got = MA.measure(model, x, y, autocast, settle_s)
    got["tensors"] = sorted(("bool" if t[0] == "torch.bool" else t[0],)
                            + tuple(t[1:]) for t in got["tensors"])
    return got


def router_counts(model) -> list:
    """Per MoE layer the kept assignments per expert, last forward."""
    return [list(m.stats["kept"]) for m in moe_blocks(model)]


as_multiset = MA.as_multiset
