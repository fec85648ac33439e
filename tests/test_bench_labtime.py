"""scripts/bench_labtime.py --only: a lab added after the benchmark's
sitting goes into the existing table, the rest of it kept, and the table
says it was measured apart."""
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import bench_labtime as B  # noqa: E402
import run_labs  # noqa: E402


def _run(folder: Path, lab: str, seconds: float, finished: str) -> None:
    (folder / lab).mkdir(parents=True)
    (folder / lab / "run.json").write_text(json.dumps(
        {"lab": lab, "status": "ok", "seconds": seconds,
         "finished": finished}))


def test_only_adds_a_lab_and_says_it_was_measured_apart(tmp_path):
    out = tmp_path / "cpu.json"
    shutil.copy(B.TABLE, out)
    old = json.loads(out.read_text())
    runs = tmp_path / "runs"
    _run(runs, "schedules", 12.5, "2026-01-01T10:00:00")
    _run(runs, "memory", 99.0, "2026-01-01T09:00:00")   # not asked for
    assert B.main(["--only", "schedules", "--from", str(runs),
                   "--out", str(out)]) == 0
    new = json.loads(out.read_text())
    assert new["labs"] == {**old["labs"], "schedules": 12.5}
    assert new["constants"] == old["constants"]
    assert new["apart"][-1] == {
        "labs": ["schedules"], "ran": ["2026-01-01T10:00:00"] * 2,
        "load_average": None, "slowdown": None}   # not known for --from
    assert all("schedules" not in e["labs"] for e in new["apart"][:-1])
    with pytest.raises(SystemExit, match="no complete"):
        B.main(["--only", "hangs", "--from", str(runs), "--out", str(out)])
    with pytest.raises(SystemExit, match="no lab nosuch"):
        B.main(["--only", "nosuch", "--out", str(out)])
    assert json.loads(out.read_text()) == new


def test_first_use_terms_are_launches_less_what_the_plan_prices():
    """first_run_s: the training launch less a bare launch and the run;
    deepspeed_first_s: the engine's launch less the training launch and
    the engine's run; stack_s: the counter check less a bare launch; a
    noisy difference below zero counts as nothing."""
    walls = {"train": 4.0, "deepspeed": 5.5, "stack": 3.0}
    assert B.first_terms(walls, 2.0, 0.2, 0.3) == {
        "first_run_s": 1.8, "deepspeed_first_s": 1.2, "stack_s": 1.0}
    assert B.first_terms({"train": 2.0, "deepspeed": 2.0, "stack": 1.0},
                         2.5, 0.2, 0.3) == {
        "first_run_s": 0.0, "deepspeed_first_s": 0.0, "stack_s": 0.0}


def test_the_labs_and_the_compile_meet_an_empty_cache(monkeypatch):
    """The benchmarks compile on an empty Inductor cache, as a fresh clone
    does (run_labs.empty_compile_cache, which bench_labtime and
    benchmark.py share), and give the caller's setting back."""
    assert B.empty_compile_cache is run_labs.empty_compile_cache
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/somewhere")
    with B.empty_compile_cache() as d:
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == d
        assert not list(Path(d).iterdir())
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/somewhere"
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    with B.empty_compile_cache():
        pass
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ
