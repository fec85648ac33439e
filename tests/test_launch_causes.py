"""labkit.launch.causes and .heartbeat: a failed launch's first line names
the first failing rank and its cause -- its last meaningful log line
(never a separator or an empty log), the signal that killed it, "killed
(out of memory?)" for a SIGKILL the kernel counted as an OOM kill, a rank
that stopped beating, the guard's own death."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labkit.launch import LaunchError, causes, heartbeat, launch

TABLE = """[rank0]: Traceback (most recent call last):
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_14:17:49
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : {code} (pid: 1366)
  error_file: <N/A>
======================================================
"""


def _run(tmp_path, code, log_text):
    run = tmp_path / "run"
    (run / "logs" / "x" / "attempt_0" / "1").mkdir(parents=True)
    log = run / "logs" / "x" / "attempt_0" / "1" / "stderr.log"
    log.write_text(log_text)
    (run / "torchrun.log").write_text(TABLE.format(code=code))
    return run, {1: [log]}


def test_the_last_meaningful_line_is_the_exception(tmp_path):
    run, logs = _run(tmp_path, 1, "Traceback (most recent call last):\n"
                     '  File "x.py", line 1\nValueError: bad shard\n'
                     "=========\n\n------\n")
    assert causes.cause(run, logs) == "rank 1: ValueError: bad shard"


def test_a_log_without_an_exception_gives_its_last_real_line(tmp_path):
    run, logs = _run(tmp_path, 1, "step 3 loss 2.1\n=====\n")
    assert causes.cause(run, logs) == "rank 1: step 3 loss 2.1"
    run, logs = _run(tmp_path / "b", 1, "")
    assert causes.cause(run, logs) == "rank 1 exited with status 1"


def test_signals_are_named_and_sigkill_hints_memory(tmp_path, monkeypatch):
    run, logs = _run(tmp_path, -11, "")
    assert causes.cause(run, logs) == "rank 1 killed by SIGSEGV, pid 1366"
    run, logs = _run(tmp_path / "b", -9, "")
    monkeypatch.setattr(causes, "kernel_says_oom", lambda pid: False)
    monkeypatch.setattr(causes, "oom_kills", lambda: 3)
    assert causes.cause(run, logs, oom_before=3) == \
        "rank 1 killed by SIGKILL, pid 1366"
    assert causes.cause(run, logs, oom_before=2) == \
        "rank 1 killed (out of memory?): SIGKILL, pid 1366"
    monkeypatch.setattr(causes, "kernel_says_oom", lambda pid: pid == 1366)
    assert "out of memory?" in causes.cause(run, logs, oom_before=None)


def test_a_stopped_process_is_stuck_a_finished_one_is_not(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time\n"
                              "time.sleep(60)"])
    try:
        beats = tmp_path / "heartbeats"
        beats.mkdir()
        (beats / "rank-1").write_text(str(child.pid))
        (beats / "rank-0").write_text("999999999")      # no such pid
        old = time.time() - 10
        for f in beats.iterdir():
            os.utime(f, (old, old))
        assert heartbeat.stuck(tmp_path, 20) is None     # not yet
        os.kill(child.pid, signal.SIGSTOP)
        time.sleep(0.2)
        rank, age, state, pid = heartbeat.stuck(tmp_path, 5)
        assert (rank, pid, state) == (1, child.pid, "stopped (SIGSTOP?)")
        assert age >= 10
    finally:
        child.kill()
        child.wait()


def _pid_of(run_dir: Path, rank: int, timeout=120) -> int:
    beat = run_dir / "heartbeats" / f"rank-{rank}"
    deadline = time.monotonic() + timeout
    while not (beat.exists() and beat.read_text()):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    time.sleep(3)      # past the rendezvous: in its hang
    return int(beat.read_text())


def _hang(run_dir, **kw):
    return launch("labkit.runs.tools.selftest", 2, {"mode": "hang", "bad_rank": 0},
                  timeout=120, run_dir=run_dir, **kw)


def _in_thread(fn):
    import threading
    out = {}

    def run():
        try:
            fn()
        except BaseException as e:   # noqa: BLE001
            out["error"] = e
    t = threading.Thread(target=run)
    t.start()
    return t, out


@pytest.mark.distributed
def test_a_sigkilled_rank_is_named_with_its_signal(tmp_path):
    run_dir = tmp_path / "run"
    t, out = _in_thread(lambda: _hang(run_dir))
    os.kill(_pid_of(run_dir, 1), signal.SIGKILL)
    t.join(120)
    first = str(out["error"]).splitlines()[0]
    assert isinstance(out["error"], LaunchError)
    assert "rank 1 killed" in first and "SIGKILL" in first, first


@pytest.mark.distributed
def test_a_stopped_rank_is_found_by_its_heartbeat(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_STALL_S", "5")
    run_dir = tmp_path / "run"
    t, out = _in_thread(lambda: _hang(run_dir))
    pid = _pid_of(run_dir, 1)
    t0 = time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    t.join(120)
    first = str(out["error"]).splitlines()[0]
    assert "rank 1 stuck: no heartbeat" in first and "SIGSTOP" in first
    assert time.monotonic() - t0 < 30        # not gloo's 120 s


@pytest.mark.distributed
def test_the_guards_death_is_named(tmp_path):
    import psutil
    run_dir = tmp_path / "run"
    t, out = _in_thread(lambda: _hang(run_dir))
    _pid_of(run_dir, 1)
    guard = next(p for p in psutil.Process().children()
                 if "labkit.launch.guard" in " ".join(p.cmdline()))
    guard.kill()
    t.join(120)
    first = str(out["error"]).splitlines()[0]
    assert f"its guard (pid {guard.pid}) was killed by SIGKILL" in first


def test_a_symlinked_run_dir_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ValueError, match="is a symbolic link"):
        launch("labkit.runs.tools.selftest", 2, {"mode": "ok"}, timeout=60,
               run_dir=tmp_path / "link")


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), 0, -1,
                                     "300"])
def test_a_launch_timeout_must_be_finite_and_positive(timeout):
    with pytest.raises(ValueError, match="finite positive timeout"):
        launch("labkit.runs.tools.selftest", 2, {"mode": "ok"}, timeout=timeout)


def test_a_rank_that_printed_nothing_is_still_in_the_report(tmp_path):
    """A rank that started and was ended before printing anything (a node
    whose peer died) is named with its empty logs, and counts as having
    run, so the report is not cut to the rendezvous's one line."""
    from labkit.launch import _ranks_ran
    from labkit.launch.report import failure_report
    assert not _ranks_ran(tmp_path)  # never met: no rank's log exists
    for r in (0, 1):
        d = tmp_path / "logs" / "run" / "attempt_0" / str(r)
        d.mkdir(parents=True)
        (d / "stdout.log").write_text("")
        (d / "stderr.log").write_text("")
    assert _ranks_ran(tmp_path)
    text = failure_report(tmp_path, 2, "x failed", explain=False)
    assert "--- rank 0: its logs are empty" in text
    assert "--- rank 1: its logs are empty" in text
