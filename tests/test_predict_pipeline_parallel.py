"""Bubble and memory formulas, and the simulator that must agree with them."""
import json
import subprocess
import sys

import pytest

from labkit.predict import pipeline_parallel as PP

GRID = [(s, p, m, v) for s in PP.SCHEDULES for p in (1, 2, 3, 4, 8)
        for m in (1, 2, 4, 8, 16) for v in ((2, 3, 4) if s == "interleaved"
                                            else (1,))
        if s != "interleaved" or m % p == 0]


def test_bubble_formulas():
    # Narayanan et al. 2021, Sec. 2.2.1 and 2.2.2
    assert PP.bubble_fraction("gpipe", 4, 8) == 3 / 8
    assert PP.bubble_fraction("1f1b", 4, 8) == 3 / 8
    assert PP.bubble_fraction("interleaved", 4, 8, 2) == 3 / 16
    assert PP.idle_fraction("1f1b", 4, 8) == pytest.approx(3 / 11)


@pytest.mark.parametrize("s,p,m,v", GRID)
def test_simulator_reproduces_bubble_and_memory(s, p, m, v):
    for f, b in ((1.0, 2.0), (1.0, 1.0), (2.0, 3.0)):
        tl = PP.simulate(s, p, m, v, f, b)
        assert tl.bubble == pytest.approx(PP.bubble_fraction(s, p, m, v))
        assert tl.makespan == pytest.approx((m + (p - 1) / v) * (f + b))
        assert tl.peak_activations[0] == pytest.approx(
            PP.first_stage_activations(s, p, m, v))
        assert len(tl.ops) == 2 * p * m * v


def test_first_stage_memory_per_schedule():
    p, m = 4, 16
    assert PP.first_stage_activations("gpipe", p, m) == m
    assert PP.first_stage_activations("1f1b", p, m) == p
    # Korthikanti et al. 2022, Sec. 4.2.3: interleaving costs a factor
    # 1 + (p - 1)/(p v) over 1F1B
    for v in (2, 4):
        assert PP.first_stage_activations("interleaved", p, m, v) == \
            pytest.approx(p * (1 + (p - 1) / (p * v)))


def test_communication_delays_grow_the_step():
    base = PP.simulate("1f1b", 4, 8)
    slow = PP.simulate("1f1b", 4, 8, comm=0.5)
    assert slow.makespan > base.makespan and slow.bubble > base.bubble


def test_p2p_bytes():
    assert PP.p2p_bytes(1, 2048, 12288, 8) == 2 * 8 * 2048 * 12288 * 2
    assert PP.p2p_bytes(1, 2048, 12288, 8, chunks=2) == \
        2 * PP.p2p_bytes(1, 2048, 12288, 8)
    assert PP.p2p_bytes(1, 2048, 12288, 8, tensor_parallel=8,
                        scatter_gather=True) == \
        PP.p2p_bytes(1, 2048, 12288, 8) // 8


@pytest.mark.parametrize("args", [("nope", 4, 8, 1), ("1f1b", 4, 8, 2),
                                  ("interleaved", 4, 6, 2),
                                  ("gpipe", 0, 8, 1)])
def test_bad_input(args):
    with pytest.raises(ValueError):
        PP.simulate(*args)


def test_cli(tmp_path):
    png = tmp_path / "t.png"
    r = subprocess.run([sys.executable, "-m", "labkit", "pipeline",
                        "--schedule", "interleaved", "--stages", "4",
                        "--microbatches", "8", "--chunks", "2", "--json",
                        "--plot", str(png)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["bubble_formula"] == d["bubble_simulated"] == 3 / 16
    assert png.stat().st_size > 1000
    bad = subprocess.run([sys.executable, "-m", "labkit", "pipeline",
                          "--schedule", "1f1b", "--stages", "4",
                          "--microbatches", "8", "--chunks", "2"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "interleaved" in bad.stderr


def test_no_matplotlib_on_import():
    code = ("import sys, labkit.predict.pipeline_parallel\n"
            "print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True).stdout.strip()
    assert out == "False"


def test_a_plot_on_a_full_disk_is_one_line_and_leaves_no_file(
        tmp_path, monkeypatch, capsys):
    """The picture goes through a temporary name: ENOSPC names the path,
    and nothing is left under the final name; /dev/full is refused."""
    import errno
    import os

    from labkit import __main__ as cli
    argv = ["pipeline", "--schedule", "1f1b", "--stages", "2",
            "--microbatches", "2", "--plot"]
    target = tmp_path / "p.png"

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", full)
    assert cli.main([*argv, str(target)]) == 2
    err = capsys.readouterr().err
    assert f"disk full at {target}" in err and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    if os.path.exists("/dev/full"):
        with __import__("pytest").raises(SystemExit):
            cli.main([*argv, "/dev/full"])
        assert "not a regular file" in capsys.readouterr().err
    assert cli.main([*argv, str(target)]) == 0 and target.stat().st_size
