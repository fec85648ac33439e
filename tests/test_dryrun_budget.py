"""The dry run's time limit scales with its work (issue 47): a bound from
a measured cost per layer shard, with a floor, said in one line."""
from __future__ import annotations

import argparse
import time

import pytest

from labkit import cli_rules
from labkit.dryrun import budget as B
from labkit.dryrun import cli


def _args(**kw):
    base = dict(profile=None, only=None, hf_config=None, preset=None,
                layers=None, gpus=8)
    return argparse.Namespace(**{**base, **kw})


def test_the_limit_grows_with_the_work_above_a_floor():
    small, how = cli.time_limit(_args(layers=2, gpus=2))
    assert small == B.FLOOR_S and "floor" in how
    big, how = cli.time_limit(_args(layers=80, gpus=128))
    assert big == pytest.approx(80 * 128 * B.SECONDS_PER_UNIT * B.BUSY)
    assert "10,240 layer shards" in how
    gpu8, _ = cli.time_limit(_args(profile="gpu8"))
    fit, _ = cli.time_limit(_args(profile="gpu8", only="fit"))
    # the whole gpu8 profile took 6 min wall on a busy 2-core machine,
    # its lab 12 alone 145 s: both limits above, the fixed 600 s below
    assert gpu8 > 600 > fit > 145


def test_a_limit_exceeded_is_one_line_naming_it(monkeypatch, capsys):
    monkeypatch.delenv("LABKIT_CLI_TIMEOUT_S", raising=False)
    with pytest.raises(TimeoutError) as e:
        with cli_rules.time_limit(0.05, "3 layer shards x 1 s = 3 s"):
            time.sleep(1)
    assert "time limit of 0 s (3 layer shards" in str(e.value)
    from labkit.__main__ import main
    monkeypatch.setattr(cli, "time_limit", lambda a: (0.05, "derived"))
    monkeypatch.setattr(cli, "dry_profile",
                        lambda *a, **k: time.sleep(1))
    assert main(["dryrun", "--profile", "cpu", "--json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "time limit of 0 s (derived)" in err[0]
