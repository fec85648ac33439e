"""labkit.results.runlock and the runner under faults: one runner per checkout and
profile (a second refuses in one line, or waits), two runs finishing at
once both kept, a failing lab (a full disk) does not stop the runner's
summary, a read-only results folder is one line."""
import errno
import importlib.util
import multiprocessing as mp
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nbformat
import pytest

from labkit import disk
from labkit.results import labfaults, labruns, runlock

ROOT = Path(__file__).resolve().parent.parent


def _script(name):
    spec = importlib.util.spec_from_file_location(
        name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


run_labs = _script("run_labs")


def _holder(folder: Path, seconds: float):
    code = textwrap.dedent(f"""
        import sys, time
        from labkit.results import runlock
        with runlock.hold({str(folder)!r}):
            print("held", flush=True)
            time.sleep({seconds})
        """)
    p = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)),
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_second_holder_refuses_naming_the_first(tmp_path):
    folder = tmp_path / "labs" / "cpu"
    p = _holder(folder, 30)
    try:
        with pytest.raises(runlock.RunnerBusy) as e:
            with runlock.hold(folder):
                pass
        line = str(e.value)
        assert f"pid {p.pid}" in line and "--wait" in line
        assert "\n" not in line
    finally:
        p.kill()
        p.wait()
    with runlock.hold(folder) as info:     # the kernel dropped the lock
        assert info["pid"] == os.getpid()
    assert not (folder / ".runner.lock").exists()   # the folder: runs only


def test_wait_waits_for_the_holder(tmp_path):
    folder = tmp_path / "cpu"
    p = _holder(folder, 2)
    said = []
    t = time.monotonic()
    with runlock.hold(folder, wait=True, poll_s=0.1, say=said.append):
        waited = time.monotonic() - t
    p.wait()
    assert waited > 0.5 and len(said) == 1 and "waiting" in said[0]


def test_the_runner_refuses_in_one_line_and_starts_nothing(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(run_labs, "run_lab",
                        lambda *a, **k: pytest.fail("a lab started"))
    p = _holder(tmp_path / "cpu", 30)
    try:
        rc = run_labs.main(["--out", str(tmp_path), "--only", "memory",
                            "--skip-preflight"])
    finally:
        p.kill()
        p.wait()
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert f"another runner (pid {p.pid}" in err


def _finish_at_once(folder, barrier, n):
    for _ in range(n):
        run = labruns.start(folder, "lab")
        (run / "run.json").write_text('{"status": "ok", "finished": "x"}')
        barrier.wait()
        labruns.finish(run, "ok")


def test_two_runs_finishing_at_once_are_both_kept(tmp_path):
    folder = tmp_path / "cpu"
    folder.mkdir()
    barrier = mp.get_context("fork").Barrier(2)
    procs = [mp.get_context("fork").Process(
        target=_finish_at_once, args=(folder, barrier, 5)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    names = sorted(d.name for d in folder.iterdir())
    assert "lab" in names and len(names) == 10, names
    assert not [n for n in names if n.endswith((".running", ".interrupted"))]
    assert all(labruns.status(folder / n) == "ok" for n in names)


def test_a_failing_lab_does_not_stop_the_summary(tmp_path, monkeypatch,
                                                 capsys):
    calls = []

    def lab(name, *a, **k):
        calls.append(name)
        if name == "memory":
            raise OSError(errno.ENOSPC, "No space left on device",
                          str(tmp_path / "cpu" / "x"))
        return "ok", 1.0, ""
    monkeypatch.setattr(run_labs, "run_lab", lab)
    rc = run_labs.main(["--out", str(tmp_path), "--only", "memory",
                        "--only", "collectives", "--skip-preflight"])
    out = capsys.readouterr().out
    assert rc == 1 and calls == ["memory", "collectives"]
    assert f"disk full at {tmp_path / 'cpu' / 'x'}" in out
    assert "1 passed, 1 failed" in out


def test_a_read_only_or_full_results_folder_is_one_line(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(run_labs, "run_lab",
                        lambda *a, **k: pytest.fail("a lab started"))

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(disk.tempfile, "mkstemp", read_only)
    rc = run_labs.main(["--out", str(tmp_path), "--only", "memory",
                        "--skip-preflight"])
    err = capsys.readouterr().err
    assert rc == 2 and err == f"run_labs: read-only at {tmp_path / 'cpu'}\n"
    monkeypatch.undo()
    monkeypatch.setattr(run_labs, "run_lab",
                        lambda *a, **k: pytest.fail("a lab started"))
    monkeypatch.setattr(disk, "MIN_FREE", 1e18)
    monkeypatch.setattr(disk.check_writable, "__defaults__", (1e18,))
    rc = run_labs.main(["--out", str(tmp_path), "--only", "memory",
                        "--skip-preflight"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(f"run_labs: disk full at {tmp_path}")


def test_write_atomic_leaves_no_truncated_file(tmp_path, monkeypatch):
    target = tmp_path / "a.tar.gz"
    target.write_bytes(b"old, complete")
    real = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(disk.DiskError, match=f"disk full at {target}"):
        disk.write_atomic(target, b"new" * 1000)
    monkeypatch.setattr(os, "fsync", real)
    assert target.read_bytes() == b"old, complete"
    assert [p.name for p in tmp_path.iterdir()] == ["a.tar.gz"]


FAKE_LAB = [
    'profile = "cpu"\nresults_dir = None',
    "import os, time\nfrom labkit.lab import Results\n"
    'time.sleep(float(os.environ.get("FAKE_LAB_SLEEP", "0")))\n'
    'res = Results("fake", profile=profile, results_dir=results_dir)\n'
    'res.add("fake", "test data, not a measurement", 1, 1.0, 1.0, "s")\n'
    "res.save()",
]


def _fake_labs(tmp_path):
    """A labs folder holding one lab, 01_fake.ipynb (FAKE_LAB's cells)."""
    labs = tmp_path / "labs"
    labs.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in FAKE_LAB]
    nb.cells[0].metadata["tags"] = ["parameters"]
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python",
                                 "display_name": "Python 3"}
    nbformat.write(nb, labs / "01_fake.ipynb")
    return labs


def _runner(labs, out, *extra, sleep=0):
    env = dict(os.environ, PYTHONPATH=str(ROOT), FAKE_LAB_SLEEP=str(sleep))
    return subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "run_labs.py"), "--labs",
         str(labs), "--out", str(out), "--only", "fake", "--skip-preflight",
         *extra], env=env, cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)


def test_two_real_runners_on_one_lab(tmp_path):
    """The first runs; the second refuses in one line, a third waits; the
    first's run is complete and current, the third's after it."""
    labs = _fake_labs(tmp_path)
    out = tmp_path / "out"
    first = _runner(labs, out, sleep=8)
    deadline = time.monotonic() + 120
    while not list((out / "cpu").glob("fake.*.running")):
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.2)
    t = time.monotonic()
    second = _runner(labs, out)
    _, err = second.communicate(timeout=60)
    assert second.returncode == 2 and time.monotonic() - t < 30
    assert err.count("\n") == 1 and f"pid {first.pid}" in err, err
    third = _runner(labs, out, "--wait")
    assert first.wait(timeout=300) == 0, first.communicate()
    assert labruns.status(out / "cpu" / "fake") == "ok"
    assert third.wait(timeout=300) == 0, third.communicate()
    folders = sorted(d.name for d in (out / "cpu").iterdir())
    assert len(folders) == 2 and "fake" in folders        # both complete
    assert all(labruns.status(out / "cpu" / f) == "ok" for f in folders)


def test_a_stopped_runner_says_one_line_no_kernel_noise(tmp_path):
    """SIGTERM to the runner's process group mid-cell: the kernel's ZMQ
    traceback goes to the run folder's kernel-stderr.log, the terminal
    shows the runner's one `stopped:` line."""
    import signal
    labs = _fake_labs(tmp_path)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT), FAKE_LAB_SLEEP="120")
    p = subprocess.Popen(
        [sys.executable, "-c", "import signal, runpy, sys\n"
         "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
         f"sys.argv = ['run_labs.py', '--labs', {str(labs)!r}, '--out', "
         f"{str(out)!r}, '--only', 'fake', '--skip-preflight']\n"
         f"runpy.run_path({str(ROOT / 'scripts' / 'run_labs.py')!r}, "
         "run_name='__main__')"], env=env, cwd=ROOT,
        start_new_session=True, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list((out / "cpu").glob("fake.*.running/01_fake.ipynb")):
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.2)
    time.sleep(6)                          # the kernel is in the cell
    os.killpg(p.pid, signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("stopped: fake: "), err
    assert "Traceback" not in err


def test_a_dead_kernel_is_one_failed_row_and_its_log_not_noise(tmp_path):
    """The kernel dies mid-cell (SIGKILL, as the OOM killer does): the lab
    is FAILED with nbclient's error as its note, the runner goes on to its
    summary, and what papermill and asyncio log about it is in
    runner.log, not on the terminal (the race of the SIGTERM test above,
    made certain)."""
    import psutil
    import signal
    labs = _fake_labs(tmp_path)
    out = tmp_path / "out"
    p = _runner(labs, out, sleep=120)
    deadline = time.monotonic() + 120
    kernel = []
    while not kernel:
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.5)
        if list((out / "cpu").glob("fake.*.running/01_fake.ipynb")):
            kernel = [c for c in psutil.Process(p.pid).children(True)
                      if "ipykernel" in " ".join(c.cmdline())]
    time.sleep(4)                          # the kernel is in the cell
    for k in kernel:
        k.send_signal(signal.SIGKILL)
    got, err = p.communicate(timeout=120)
    assert p.returncode == 1, (got, err)
    row = [ln for ln in got.splitlines() if ln.startswith("fake ")][-1]
    assert "FAILED" in row and "Kernel died" in row, got
    assert "Kernel died" not in err and "Traceback" not in err, err
    assert "Kernel died" in (out / "cpu" / "runner.log").read_text()


def test_the_summary_note_is_the_errors_first_line():
    from papermill.exceptions import PapermillExecutionError
    e = PapermillExecutionError(
        3, 3, "launch(...)", "LaunchError",
        "labkit.runs.x on 2 ranks failed (torchrun exit status 1): rank 1 "
        "killed by SIGKILL, pid 7\nrun folder: /r\n--- torchrun ---\n"
        "======", [])
    assert labfaults.first_line(e) == (
        "LaunchError: labkit.runs.x on 2 ranks failed (torchrun exit "
        "status 1): rank 1 killed by SIGKILL, pid 7")


def test_a_notebook_cut_short_by_a_full_disk_names_the_disk(tmp_path,
                                                           monkeypatch):
    monkeypatch.setattr(disk.shutil, "disk_usage",
                        lambda p: type("U", (), {"free": 10})())
    said = labfaults.disk_fault(ValueError("Notebook does not appear to "
                                           "be JSON"), tmp_path)
    assert said.startswith(f"disk full at {tmp_path}")
