"""Lab 12's model built on meta and materialised sharded (issue 47): the
rehearsed GPU rank holds no parameter on the host; built on the host it
held the whole fp32 model. And the materialised weights are initialised
as the decoder's own (real tensors, on the CPU)."""
from __future__ import annotations

import torch
from torch import nn

from labkit.launch.request import as_argv
from labkit.nn.model import GPTConfig, build
from labkit.predict.memory import gpt_params
from labkit.rehearse.node import describe
from labkit.rehearse.run import rehearse_ranks
from labkit.training import meta_init

SHAPE = {"layers": 1, "hidden": 256, "heads": 4, "vocab": 2048, "seq": 64}


def _host_peak(monkeypatch, on_meta: bool) -> int:
    if not on_meta:
        monkeypatch.setattr(meta_init, "on_meta", lambda ctx, s: False)
    res = rehearse_ranks("labkit.runs.fit", 2, as_argv(
        {"parts": "train", "strategy": "fsdp2_full", "micro_batch": 1,
         "accumulation": 1, "steps": 1, "bf16": True, **SHAPE}),
        describe("h100x8"), "meta test", ranks="all")
    assert res["problems"] == [], res["problems"]
    return max(r["host_peak_bytes"] for r in res["ranks"])


def test_gpu_rank_builds_on_meta_and_keeps_nothing_on_the_host(
        monkeypatch):
    psi = gpt_params(SHAPE["layers"], SHAPE["hidden"], SHAPE["heads"],
                     SHAPE["vocab"], SHAPE["seq"])
    meta = _host_peak(monkeypatch, True)
    assert meta < 1e-3 * 4 * psi          # the data batch, a few KB
    host = _host_peak(monkeypatch, False)   # the old path, for contrast
    assert host >= 4 * psi                 # the whole fp32 model


def test_materialised_weights_are_the_decoders_init():
    with torch.device("meta"):
        model = build(GPTConfig(**{k: SHAPE[k] for k in SHAPE}))
    meta_init.materialise(model, torch.device("cpu"))
    for m in model.modules():
        if isinstance(m, nn.LayerNorm):
            assert torch.equal(m.weight, torch.ones_like(m.weight))
            assert torch.equal(m.bias, torch.zeros_like(m.bias))
        if isinstance(m, nn.Linear) and m.bias is not None:
            assert torch.equal(m.bias, torch.zeros_like(m.bias))
    w = model.head.out.weight
    assert abs(w.std().item() - 0.02) < 0.002
