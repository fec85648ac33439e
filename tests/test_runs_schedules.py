"""labkit.runs.schedules: torch's schedules driven on one in-process gloo
rank (``p = 1``; the V puts both of its stages there), so the stage
calls, the bytes the pack hook counts and the gradients are checked
without a launch. Lab 18 runs the same code on two real ranks."""
import types

import pytest
import torch
import torch.distributed as tdist

from labkit.dist import Context
from labkit.predict.pipeline_parallel import zero_bubble as Z
from labkit.predict.pipeline_parallel.schedules import rank_order
from labkit.runs.schedules import run, stages


@pytest.fixture
def one_rank():
    # an in-memory store: no port, two test runs never meet on it
    tdist.init_process_group("gloo", store=tdist.HashStore(), rank=0,
                             world_size=1)
    try:
        yield Context(0, 1, 0, "gloo", torch.device("cpu"))
    finally:
        tdist.destroy_process_group()


def test_every_schedule_runs_its_order_saves_its_bytes_keeps_the_grads(
        one_rank):
    a = types.SimpleNamespace(layers=4, hidden=16, micro_batch=4,
                              microbatches=2, repeats=1, seed=0)
    x, y = stages.data(a.hidden, a.microbatches, a.micro_batch)
    ref = run.reference_grads(stages.build(a.layers, a.hidden), x, y)
    for name in run.SCHEDULES:
        out = run.run_one(name, a, one_rank, ref)
        v = out["chunks"]
        ran = [(e["kind"], e["microbatch"], e["chunk"])
               for e in out["events"]]
        assert ran == rank_order(name, 1, 2, v)[0], name
        saved = {e["saved"] for e in out["events"] if e["kind"] == "F"}
        assert saved == {Z.stage_saved_bytes(a.layers // v, 16, 4)}, name
        assert out["grad_max_err"] < 1e-6, name
        if name != "1f1b":
            assert len(out["torch_order"]) == len(ran), name


def test_the_model_is_the_same_on_every_rank():
    a, b = stages.build(2, 8, seed=3), stages.build(2, 8, seed=3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(),
                                                 b.parameters()))
    assert [type(m).__name__ for m in a[0]] == ["Linear", "Tanh"]
