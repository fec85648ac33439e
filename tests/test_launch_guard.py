"""No run outlives its launcher: kill the caller of `launch` (SIGTERM,
SIGKILL, SIGHUP, SIGINT) or restart the Jupyter kernel that runs it, and
torchrun and every rank are gone within 10 s (labkit.launch.guard)."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labkit.launch import ROOT
from labkit.launch.guard import descendants
from labkit.measure.hang import orphans

pytestmark = pytest.mark.distributed

HANG = ("from labkit.launch import launch\n"
        "launch('labkit.runs.tools.selftest', 2, {{'mode': 'hang'}}, timeout=600, "
        "run_dir={!r})\n")
GONE_WITHIN_S = 10.0


def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT))


# The signals the owner test sends (SIGKILL cannot be ignored or caught).
SENT = (signal.SIGTERM, signal.SIGKILL, signal.SIGHUP, signal.SIGINT)


def _as_at_a_terminal():
    """Every signal the test sends at its default, as a shell's foreground
    job has them: a test run started in the background inherits SIGINT
    ignored (then Python ignores Ctrl-C too), one started under `nohup`
    SIGHUP ignored (then the owner would outlive its SIGHUP)."""
    for sig in SENT:
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)


def wait_until_hanging(run_dir: Path, timeout: float = 180.0) -> None:
    """Until a rank of selftest --mode hang says it hangs (all started)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for f in (run_dir / "logs").glob("**/std*.log"):
            if "hanging on purpose" in f.read_text(errors="replace"):
                return
        time.sleep(0.5)
    raise AssertionError(f"the run in {run_dir} never started: "
                         + (run_dir / "torchrun.log").read_text()[-2000:])


def gone_within(run_dirs, seconds: float = GONE_WITHIN_S) -> dict:
    """Seconds until no process carries each run's LABKIT_RUN_DIR."""
    t0, left = time.monotonic(), {str(d): None for d in run_dirs}
    while time.monotonic() - t0 < seconds:
        for d in left:
            if left[d] is None and not orphans(d):
                left[d] = time.monotonic() - t0
        if all(v is not None for v in left.values()):
            break
        time.sleep(0.2)
    return left


def test_descendants_sees_grandchildren():
    p = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    time.sleep(0.3)
    mine = descendants()
    try:
        assert p.pid in mine and len(mine) >= 2
    finally:
        for pid in mine:
            os.kill(pid, signal.SIGKILL)
        p.wait()


def test_killing_the_owner_ends_the_run(tmp_path):
    """One owner per signal, all at once (one launch's worth of time)."""
    owners = {}
    for sig in SENT:
        run_dir = tmp_path / sig.name
        owners[sig] = (run_dir, subprocess.Popen(
            [sys.executable, "-c", HANG.format(str(run_dir))], cwd=ROOT,
            env=_env(), start_new_session=True,
            preexec_fn=_as_at_a_terminal))
    try:
        for run_dir, _ in owners.values():
            wait_until_hanging(run_dir)
        assert all(len(orphans(d)) >= 4 for d, _ in owners.values())
        for sig, (_, owner) in owners.items():
            owner.send_signal(sig)
        for _, owner in owners.values():
            owner.wait(timeout=30)
        gone = gone_within([d for d, _ in owners.values()])
        print("seconds until every process was gone:", gone)
        assert all(v is not None for v in gone.values()), gone
    finally:
        for run_dir, owner in owners.values():
            owner.kill()
            for pid in orphans(run_dir):
                os.kill(pid, signal.SIGKILL)


def test_restarting_the_jupyter_kernel_ends_the_run(tmp_path):
    from jupyter_client import KernelManager
    run_dir = tmp_path / "kernel"
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=_env(), cwd=str(ROOT))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        kc.execute(HANG.format(str(run_dir)))
        wait_until_hanging(run_dir)
        km.restart_kernel(now=True)
        gone = gone_within([run_dir])
        print("seconds until every process was gone:", gone)
        assert gone[str(run_dir)] is not None, orphans(run_dir)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        for pid in orphans(run_dir):
            os.kill(pid, signal.SIGKILL)
