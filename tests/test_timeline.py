"""scripts/timeline.py: a run's units, workers, tail and the longest-first
makespan, from the timeline conftest.py writes (LABKIT_TIMELINE)."""
import importlib.util
import json
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import timeline  # noqa: E402


def row(unit, worker, start, stop, when="call"):
    return {"id": f"{unit}::t", "unit": unit, "when": when,
            "worker": worker, "start": start, "stop": stop}


def test_units_tail_and_longest_first():
    rows = [row("a", "gw0", 100, 101, "setup"), row("a", "gw0", 101, 110),
            row("b", "gw1", 100, 102), row("c", "gw1", 103, 104),
            row("d", "gw0", 110, 130)]
    us = timeline.units(rows)
    assert us["a"] == {"worker": "gw0", "start": 100, "stop": 110,
                       "busy": 10, "cpu": None}
    # 10, 2, 1, 20 on 2 workers: 20 | 10 + 2 + 1
    assert timeline.longest_first([10, 2, 1, 20], 2) == 20
    # greedy, not optimal: 3+2+2 | 3+2 (the best split is 6)
    assert timeline.longest_first([3, 3, 2, 2, 2], 2) == 7
    text = timeline.report(rows)
    assert "wall 30 s" in text
    assert "gw1: busy 3 s, done at 4 s (tail 26 s), gaps 1 s" in text
    assert text.splitlines()[-1].endswith("20 s (observed 30 s)")


def test_the_hook_writes_the_controllers_lines(tmp_path, monkeypatch):
    t = tmp_path / "t.jsonl"
    monkeypatch.setenv("LABKIT_TIMELINE", str(t))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    spec = importlib.util.spec_from_file_location("root_conftest",
                                                  ROOT / "conftest.py")
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    gw = types.SimpleNamespace(gateway=types.SimpleNamespace(id="gw1"))
    for node, when in ((gw, "setup"), (None, "call")):
        rep = types.SimpleNamespace(nodeid="tests/test_grade.py::test_x",
                                    when=when, start=5.0, stop=7.5)
        if node:
            rep.node = node
            rep.user_properties = [("cpu", 1.25)]
        conf.pytest_runtest_logreport(rep)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")   # a worker: silent
    conf.pytest_runtest_logreport(rep)
    conf.TIMELINE = str(tmp_path / "gone" / "t.jsonl")   # never raises
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    conf.pytest_runtest_logreport(rep)
    lines = [json.loads(x) for x in t.read_text().splitlines()]
    assert lines == [{"id": "tests/test_grade.py::test_x",
                      "unit": "assignments", "when": w, "worker": k,
                      "start": 5.0, "stop": 7.5, "cpu": c}
                     for w, k, c in (("setup", "gw1", 1.25),
                                     ("call", "main", None))]


def test_cpu_seconds_and_the_units_that_wait():
    rows = [dict(row("compute", "gw0", 0, 10), cpu=19.0),
            dict(row("sleep", "gw1", 0, 8), cpu=0.5),
            row("old", "gw1", 8, 9)]
    us = timeline.units(rows)
    assert us["compute"]["cpu"] == 19.0 and us["old"]["cpu"] is None
    text = timeline.report(rows)
    assert "CPU 20 s in test phases (2 units measured), 1.95 cores" in text
    waits = text.split("most waiting")[1].splitlines()[1:-1]
    assert [w.split() for w in waits] == [["7.5", "sleep"]]


def test_the_worker_hook_adds_each_phases_cpu_seconds(monkeypatch):
    spec = importlib.util.spec_from_file_location("root_conftest2",
                                                  ROOT / "conftest.py")
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    conf.TIMELINE = "t.jsonl"
    reports = []
    for _ in range(2):
        rep = types.SimpleNamespace(user_properties=[])
        hook = conf.pytest_runtest_makereport(None, None)
        next(hook)
        try:
            hook.send(types.SimpleNamespace(get_result=lambda r=rep: r))
        except StopIteration:
            pass
        reports.append(dict(rep.user_properties)["cpu"])
        sum(i * i for i in range(200_000))     # some CPU between reports
    assert reports[0] == 0 and reports[1] >= 0
