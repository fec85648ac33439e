"""labkit.results.labruns: a runner killed inside ``finish`` (SIGKILL between or
after its two renames) loses no complete run: the next start keeps it
current, or restores it and says so; a run whose lab failed and whose
runner then died is labelled failed, not interrupted."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from labkit.results import labruns, resultsfile

ROOT = Path(__file__).resolve().parent.parent
RECORD = {"quantity": "fake", "strategy": "test data", "world_size": 1,
          "predicted": 1.0, "measured": 1.0, "ratio": 1.0, "unit": "s",
          "device": "test data", "profile": "cpu"}


def _fill(run: Path, status: str, finished: str) -> None:
    """What the runner writes before finish: results, then run.json with
    the results' checksums."""
    (run / "results.json").write_text(json.dumps([RECORD]))
    (run / "run.json").write_text(json.dumps(
        {"lab": "fake", "status": status, "finished": finished,
         "sha256": resultsfile.checksums(run, ["results.json"])}))


KILLED = """
import os, signal, sys
from pathlib import Path
from labkit.results import labruns
sys.path.insert(0, {tests!r})
from test_labruns import _fill
run = labruns.start(Path({profile!r}), "fake")
_fill(run, "ok", "2026-12-02T00:00:00")
real, n = os.rename, [0]
def rename(a, b):
    real(a, b)
    n[0] += 1
    if n[0] == {after}:
        os.kill(os.getpid(), signal.SIGKILL)
os.rename = rename
labruns.finish(run, "ok")
"""


@pytest.mark.parametrize("after", [1, 2], ids=["between", "after"])
def test_a_runner_killed_inside_finish_loses_no_complete_run(tmp_path,
                                                             after):
    profile = tmp_path / "cpu"
    old = profile / "fake"
    old.mkdir(parents=True)
    _fill(old, "ok", "2026-12-01T00:00:00")
    p = subprocess.run([sys.executable, "-c", KILLED.format(
        tests=str(ROOT / "tests"), profile=str(profile), after=after)],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60)
    assert p.returncode == -9
    if after == 1:          # the old run aside, the new one not in place
        assert not (profile / "fake").exists()
    done = labruns.label_interrupted(profile)      # the next start
    if after == 1:
        assert done == [profile / "fake"]
        line = labruns.said(done[0])
        assert "restored as fake/" in line and "\n" not in line
    else:
        assert done == []
    current, note = labruns.last_complete(profile, "fake")
    assert current == profile / "fake"
    assert labruns._finished(current) == "2026-12-02T00:00:00", note
    assert "left out" not in note
    kept = [d.name for d in profile.iterdir()]
    assert len(kept) == 2 and not any(n.endswith(
        (".running", ".interrupted")) for n in kept), kept


def test_an_older_complete_run_does_not_replace_a_newer_current(tmp_path):
    profile = tmp_path / "cpu"
    (profile / "fake").mkdir(parents=True)
    _fill(profile / "fake", "ok", "2026-12-03T00:00:00")
    run = profile / "fake.20261201-000000.running"
    run.mkdir()
    _fill(run, "ok", "2026-12-01T00:00:00")
    done = labruns.label_interrupted(profile)
    assert done == [profile / "fake.20261201-000000"]
    assert "a newer one is current" in labruns.said(done[0])
    assert labruns.last_complete(profile, "fake")[0] == profile / "fake"


@pytest.mark.parametrize("verdict,suffix", [
    ("FAILED", ".failed"), (None, ".interrupted"), ("damaged",
                                                    ".interrupted")])
def test_a_dead_runners_run_is_labelled_by_what_it_holds(tmp_path, verdict,
                                                         suffix):
    profile = tmp_path / "cpu"
    run = profile / "fake.20261201-000000.running"
    run.mkdir(parents=True)
    if verdict:
        _fill(run, "ok" if verdict == "damaged" else verdict,
              "2026-12-01T00:00:00")
    if verdict == "damaged":       # ok, but its results do not match
        (run / "results.json").write_text("[]")
    done = labruns.label_interrupted(profile)
    assert [d.name for d in done] == ["fake.20261201-000000" + suffix]
    assert labruns.last_complete(profile, "fake")[0] is None
