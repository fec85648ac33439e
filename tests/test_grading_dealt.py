"""Data dealt by the grader's hub (labkit/buildit/dealt.py) on forked
ranks: the answer key still scores; a rank that draws the whole sequence,
batch or layer itself and computes the answer alone (tests/buildit/
hostile_cp_local.py, hostile_zero_local.py, hostile_moe_local.py,
hostile_tp_local.py) scores on its own draw and fails on the dealt one;
the seed is the rerun's, drawn after the forks, in no rank's result."""
import json

import pytest

from labkit import buildit
from test_grading_ranks import FIXTURES, fresh_fork_ranks, master_key

pytestmark = pytest.mark.distributed


def rows(got):
    return {r["check"]: r for r in buildit.grade({**got,
                                                  "loopback_bytes": 0})}


@pytest.mark.parametrize("lab, stem, marker", [
    ("context_parallel", "11_context_parallel", "def ring_attention"),
    ("tensor_parallel", "05_tensor_parallel", "class ColumnParallelLinear")])
def test_the_key_on_dealt_data_scores_full_marks(tmp_path, lab, stem,
                                                 marker):
    key = master_key(stem, marker)
    got = fresh_fork_ranks(lab, key, buildit.harness(lab).HIDDEN,
                           buildit.hidden_world(lab), tmp_path, 60, True)
    assert got["error"] is None, got["error"]
    seed = got["data_seed"]
    assert type(seed) is int and got["config"]["data_seed"] == seed
    assert str(seed) not in json.dumps(got["ranks"])
    assert all(r["passed"] for r in rows(got).values()), rows(got)


@pytest.mark.parametrize("lab, fixture, checks", [
    ("context_parallel", "hostile_cp_local", ["output", "grads"]),
    ("zero", "hostile_zero_local", ["params"]),
    ("experts", "hostile_moe_local", ["output", "grads"]),
    ("tensor_parallel", "hostile_tp_local", ["output"])])
def test_a_rank_that_computes_alone_fails_on_dealt_data(tmp_path, lab,
                                                        fixture, checks):
    source = (FIXTURES / f"{fixture}.py").read_text()
    cfg, world = buildit.harness(lab).HIDDEN, buildit.hidden_world(lab)
    own = fresh_fork_ranks(lab, source, cfg, world, tmp_path / "own", 60,
                           False)
    assert own["error"] is None and "data_seed" not in own["config"]
    assert all(rows(own)[c]["passed"] for c in checks), rows(own)
    got = fresh_fork_ranks(lab, source, cfg, world, tmp_path / "hub", 60,
                           True)
    assert got["error"] is None, got["error"]
    assert not any(rows(got)[c]["passed"] for c in checks), rows(got)


def test_a_rank_that_refuses_its_share_draws_other_numbers(tmp_path):
    """``dealt.DEAL = None`` in the student's file: the rank's own draw,
    which is not the data the reference reads: 0 on "params"."""
    source = master_key("03_sharding", "class FSDP") + (
        "\nimport importlib\n"
        "importlib.import_module('lab' + 'kit.buildit.dealt').DEAL = None\n")
    got = fresh_fork_ranks("fsdp", source, buildit.harness("fsdp").HIDDEN,
                           2, tmp_path, 60, True)
    assert got["error"] is None, got["error"]
    assert not rows(got)["params"]["passed"]
