"""labkit.rehearse.isolate: each rehearsed rank in a forked child, so that
a crash of torch's code under fake tensors is one rank's line, not the
death of the process (a notebook's kernel) that rehearses; and a dead
kernel in a notebook's rehearsal is one failing cell, not a traceback."""
from __future__ import annotations

import os

import nbformat

from labkit.rehearse.hook import fake_limit, limit_reason
from labkit.rehearse.isolate import CRASHED, fault_file, rank_apart


def _segfault(argv=None):
    import ctypes
    ctypes.string_at(0)


def _works(argv=None):
    import torch
    from labkit import dist
    ctx = dist.init()
    print("rank says hello")
    dist.save(ctx, {"n": torch.ones(3, device=ctx.device).sum()})


def test_a_crashed_rank_is_one_line_and_a_limit(tmp_path):
    r = rank_apart(_segfault, 2, 0, [], str(tmp_path))
    assert r.error.startswith(CRASHED) and "SIGSEGV" in r.error
    line = f"launch x, rank 0: error: {r.error}"
    assert fake_limit(line)
    assert "cannot" in limit_reason(line)


def test_a_crash_stack_goes_to_a_file_not_stderr(tmp_path, capfd):
    """pytest's faulthandler, inherited by the fork, printed the child's
    80 frames and "Fatal Python error" in the middle of the test log."""
    import faulthandler
    import os
    was = faulthandler.is_enabled()
    faulthandler.enable()
    try:
        r = rank_apart(_segfault, 2, 0, [], str(tmp_path))
    finally:
        if not was:
            faulthandler.disable()
    err = capfd.readouterr().err
    assert "Fatal Python error" not in err
    path = fault_file(str(tmp_path), 0)
    assert path in r.error
    assert "_segfault" in open(path).read()


def test_a_clean_rank_leaves_no_fault_file(tmp_path):
    r = rank_apart(_works, 2, 0, [], str(tmp_path))
    assert r.error is None
    assert not os.path.exists(fault_file(str(tmp_path), 0))


def test_a_rank_apart_gives_back_its_record_and_its_lines(tmp_path, capsys):
    r = rank_apart(_works, 2, 1, [], str(tmp_path))
    assert r.error is None and r.violations == [] and r.peak > 0
    assert "rank says hello" in capsys.readouterr().out
    assert r.record is not None


def test_a_dead_kernel_is_one_failing_cell(tmp_path):
    from labkit.rehearse.node import describe
    from labkit.rehearse.notebooks import rehearse_notebook
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python",
                                 "display_name": "Python 3"}
    nb.cells = [nbformat.v4.new_code_cell("x = 1"),
                nbformat.v4.new_code_cell("import os, signal\n"
                                          "os.kill(os.getpid(), signal.SIGKILL)"),
                nbformat.v4.new_code_cell("y = 2")]
    path = tmp_path / "99_dies.ipynb"
    nbformat.write(nb, path)
    res = rehearse_notebook("dies", {}, "gpu8", describe(), nb_path=path)
    rows = {c["cell"]: c for c in res["cells"]}
    assert rows[0]["status"] == "ran"
    assert rows[1]["status"] == "failure"
    assert "kernel died" in rows[1]["reason"]
    assert 2 not in rows


def _sleeps(argv=None):
    import time
    time.sleep(60)


def test_an_interrupted_wait_leaves_no_child(tmp_path):
    """A cell's timeout interrupts the kernel while it waits for a rank:
    the child goes with it (no process outlives its launcher)."""
    import os
    import signal
    import threading
    import psutil
    import pytest
    me = psutil.Process()
    # children of earlier tests in this worker (a test's long-lived
    # server, a Popen not yet reaped) are not this launch's
    before = set(me.children())
    timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        rank_apart(_sleeps, 2, 0, [], str(tmp_path))
    assert [c for c in me.children() if c not in before] == []
