"""Planted faults on 3 gloo ranks: each tool that can see the fault names
the rank that was planted, at the predicted sequence number, and nothing
is left running."""
import json
import pickle

import pytest

from labkit.launch import LaunchError, launch
from labkit.measure import hangs as M
from labkit.measure.hang import orphans
from labkit.predict import hangs as H
from labkit.runs.hangs import fr_env, normalised

pytestmark = pytest.mark.distributed
WORLD, CULPRIT, AT = 3, 2, 1


def _plant(run, fault, detail=False):
    env = dict(fr_env())
    if detail:
        env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    launch("labkit.runs.hangs", WORLD, {
        "fault": fault, "culprit": CULPRIT, "at": AT, "steps": 3,
        "timeout_s": 2.0}, timeout=120, run_dir=run, env=env)
    return [json.loads(f.read_text()) for f in sorted(run.glob("rank-*"))]


def test_detail_names_the_reordered_rank(tmp_path):
    recs = _plant(tmp_path / "order", "order", detail=True)
    said = M.detail_culprit(recs)
    assert said["rank"] == CULPRIT
    assert said["seq"] == H.detail_seq(AT)
    assert said["op"] == "broadcast"   # it broadcast first
    assert orphans(tmp_path / "order") == []


def test_recorder_and_py_spy_name_the_slow_rank(tmp_path):
    run = tmp_path / "slow"
    recs = _plant(run, "slow")
    assert all(r["error"] for r in recs)      # every rank timed out
    fr = M.fr_culprit(run / "fr", WORLD)
    assert (fr["rank"], fr["seq"], fr["op"]) == (
        CULPRIT, H.fr_seq(AT), "all_reduce")
    spy = M.pyspy_culprit(run / "pyspy", WORLD)
    assert spy["rank"] == CULPRIT and spy["op"] == "load_batch"
    assert orphans(run) == []


def test_a_dead_rank_fails_the_launch_and_is_named(tmp_path):
    run = tmp_path / "dead"
    with pytest.raises(LaunchError, match="SIGKILL"):
        _plant(run, "dead")
    assert M.fr_culprit(run / "fr", WORLD)["missing"] == [CULPRIT]
    assert M.pyspy_culprit(run / "pyspy", WORLD)["rank"] == CULPRIT
    assert orphans(run) == []


def test_normalised_keys_the_config_by_the_entries_group():
    """torch 2.13's gloo dump keys the default group's config "" while
    its entries say "0"; only that key changes."""
    raw = pickle.dumps({"version": "2.10", "entries": [
        {"process_group": ["0", "default_pg"], "collective_seq_id": 1}],
        "pg_config": {"": {"name": "", "desc": "", "ranks": "[0, 1, 2]"}}})
    d = normalised(raw, 3)
    assert d["pg_config"] == {"0": {"name": "0", "desc": "default_pg",
                                    "ranks": "[0, 1, 2]"}}
    assert d["entries"] == pickle.loads(raw)["entries"]
