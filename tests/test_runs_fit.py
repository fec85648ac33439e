"""Recompute, accumulation and the capstone's training run, on 2 ranks.

One launch: the kept bytes equal the activation ledger for every recompute
mode, plain and under FSDP2; the counted collectives of a step of k
micro-batches equal predict.sharding.accumulation; the trained configuration's
measured peak stays within the planner's budget.
"""
import math

import pytest

from labkit.launch import launch
from labkit.nn.model import GPTConfig
from labkit.predict import activations as A
from labkit.predict.sharding.accumulation import (step_calls, summary,
                                                  unsharded_grad_bytes)
from labkit.predict.fit import Config, HEADROOM, per_rank_bytes, unit_shapes

pytestmark = pytest.mark.distributed
MB, K = 2, 3


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return launch("labkit.runs.fit", 2,
                  {"parts": "recompute,accumulation,train",
                   "micro_batch": MB, "accumulation": K, "steps": 2,
                   "repeats": 1, "strategy": "fsdp2_full",
                   "recompute": "selective"},
                  timeout=240, run_dir=tmp_path_factory.mktemp("fit"))


def test_kept_bytes_equal_the_ledger(ranks):
    c = GPTConfig()
    for r in ranks:
        for row in r["recompute"]:
            want = A.total(A.saved(c.layers, c.hidden, c.heads, c.vocab,
                                   c.seq, MB, recompute=row["recompute"]))
            assert row["kept"] == want, row


def test_accumulation_collectives_equal_prediction(ranks):
    c = GPTConfig()
    units = unit_shapes(c.layers, c.hidden, c.heads, c.vocab, c.seq)
    for r in ranks:
        for row in r["accumulation"]:
            s, ns = row["strategy"], row["no_sync"]
            if row["no_reshard"]:
                continue   # test_no_reshard_gathers_once
            want = summary(step_calls(units, 2, s, K, ns))
            got = {op: v for op, v in row["summary"].items()
                   if op in want}
            assert got == want, row
            assert row["grads_held_between"] == unsharded_grad_bytes(
                units, 2, s, K, ns)


def test_chosen_peak_within_budget(ranks):
    c = GPTConfig()
    model = {k: getattr(c, k) for k in ("layers", "hidden", "heads",
                                         "vocab", "seq")}
    pred = per_rank_bytes(model, 2, Config("fsdp2_full", "selective", MB, K))
    for r in ranks:
        t = r["train"]
        assert t["live_peak"]["bytes"] <= pred["total"] / HEADROOM
        assert all(0 < x < 10 for x in t["losses"])


def test_no_reshard_gathers_once_and_holds_the_weights(ranks):
    """FSDP2 with set_reshard_after_forward/backward(False) and gradient
    sync off until the last micro-batch (issue 29, item 6): one
    SHARD_GRAD_OP step's collectives for the k micro-batches -- each unit
    gathered once, reduce-scattered once -- at the cost of the unsharded
    weights held beside the unsharded gradients."""
    from labkit.predict.sharding.calls import predict_calls
    c = GPTConfig()
    units = unit_shapes(c.layers, c.hidden, c.heads, c.vocab, c.seq)
    psi = sum(math.prod(s) for u in units for s in u)
    for r in ranks:
        row = next(x for x in r["accumulation"] if x["no_reshard"])
        want = summary(predict_calls(units, 2, "shard_grad_op"))
        got = {op: v for op, v in row["summary"].items() if op in want}
        assert got == want, row
        plain = summary(step_calls(units, 2, "fsdp2_full", K, True))
        assert got["all_gather"]["calls"] * 2 * K == \
            plain["all_gather"]["calls"]
        assert row["grads_held_between"] == 4 * psi   # unsharded fp32
        assert row["params_held_between"] == 4 * psi   # gathered fp32
