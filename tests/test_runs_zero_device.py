"""Lab 4's DeepSpeed engine is built on the rank's device (issue 28): the
client Adam is made after the model is on the GPU, so it is the fused
kernel there, as the dry run and the ledger assume; offloaded optimizers
stay on the CPU model (their step runs on CPU partitions). ``meta``
stands for the GPU (no CUDA here)."""
from __future__ import annotations

import pytest
import torch

from labkit.dist import Context
from labkit.nn.model import GPTConfig
from labkit.runs import zero as Z
from labkit.predict.zero import variant

CONFIG = GPTConfig(layers=1, hidden=32, heads=2, vocab=64, seq=16)
GPU = Context(rank=0, world_size=1, local_rank=0, backend="nccl",
              device=torch.device("meta"))


@pytest.mark.parametrize("name", ["zero0", "zero1", "zero2", "zero3"])
def test_engine_model_is_on_the_rank_device(name):
    model = Z.engine_model(CONFIG, variant(name, world_size=1), GPU, 0)
    assert {p.device.type for p in model.parameters()} == {"meta"}


@pytest.mark.parametrize("name", ["zero2_offload_opt",
                                  "zero3_offload_params"])
def test_offloaded_optimizer_keeps_the_cpu_model(name):
    model = Z.engine_model(CONFIG, variant(name, world_size=1), GPU, 0)
    assert {p.device.type for p in model.parameters()} == {"cpu"}


def test_run_deepspeed_builds_the_optimizer_on_the_engine_model(
        monkeypatch):
    """The optimizer is made from engine_model's model (not a CPU one)."""
    seen = {}
    model = Z.engine_model(CONFIG, variant("zero1", world_size=1), GPU, 0)
    monkeypatch.setattr(Z, "engine_model", lambda *a: model)

    def make_optimizer(m):
        seen["model"] = m
        raise RuntimeError("stop before deepspeed.initialize")
    monkeypatch.setattr(Z, "make_optimizer", make_optimizer)
    a = Z.parse_args(["--variants", "zero1", "--batch", "1"])
    with pytest.raises(RuntimeError, match="stop before"):
        Z.run_deepspeed("zero1", CONFIG, GPU, a)
    assert seen["model"] is model
