"""Recompute, accumulation and the capstone's training run, on 2 ranks.

One launch: the kept bytes equal the activation ledger for every recompute
mode, plain and under FSDP2; the counted collectives of a step of k
micro-batches equal predict.accumulation; the trained configuration's
measured peak stays within the planner's budget.
"""
import pytest

from labkit.launch import launch
from labkit.model import GPTConfig
from labkit.predict import activations as A
from labkit.predict.accumulation import (step_calls, summary,
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
