"""labkit.cli_rules: every command of ``python -m labkit`` fed NaN, inf,
1e400, 0, -1, 10^9, "" in each of its number arguments (read from the
command's own parser, so an argument added later is fed too), unknown
names and broken files: rc 2 and one line on stderr, no traceback, within
a time bound; a value the command accepts gives its answer (rc 0 or 1)
within the same bound."""
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labkit import __main__ as cli
from labkit import cli_rules

ROOT = Path(__file__).resolve().parent.parent
BOUND_S = 60
BASE = {
    "memory": ["--params", "7e9"],
    "comm": ["--params", "7e9"],
    "flops": ["--layers", "2", "--hidden", "64", "--heads", "4", "--seq",
              "32", "--vocab", "256", "--batch", "8"],
    "pipeline": ["--schedule", "1f1b", "--stages", "4", "--microbatches",
                 "8"],
    "plan": ["--params", "7e9", "--gpus", "8", "--batch", "64"],
    "dryrun": ["--layers", "2", "--hidden", "64", "--heads", "4", "--seq",
               "32", "--vocab", "256"],
}
NEVER = ["nan", "inf", "-inf", "1e400", ""]         # always refused
ODD = ["0", "-1", "1e9", "1000000000", "-1000000000"]  # refused or answered


def run(argv, capsys):
    os.environ["LABKIT_CLI_TIMEOUT_S"] = str(BOUND_S)
    t = time.monotonic()
    try:
        rc = cli.main(argv)
    except SystemExit as e:
        rc = e.code
    seconds = time.monotonic() - t
    err = capsys.readouterr().err
    return rc, err, seconds


def number_options(command):
    import argparse
    import importlib
    parser = argparse.ArgumentParser()
    importlib.import_module(cli.COMMANDS[command][0]).add_arguments(parser)
    return [a.option_strings[0] for a in parser._actions
            if a.type in (int, float) and a.option_strings]


def with_value(command, option, value):
    argv = list(BASE[command])
    if option in argv:
        argv[argv.index(option) + 1] = value
    else:
        argv += [option, value]
    return [command, *argv]


CASES = [(c, o, v) for c in BASE for o in number_options(c)
         for v in NEVER + ODD]


def assert_one_line(rc, err, seconds):
    assert seconds < BOUND_S, seconds
    assert "Traceback" not in err, err
    if rc == 2:
        assert err.count("\n") == 1 and err.strip(), err


@pytest.mark.parametrize("command,option,value", CASES,
                         ids=[f"{c}{o}={v}" for c, o, v in CASES])
def test_every_number_argument(command, option, value, capsys):
    rc, err, seconds = run(with_value(command, option, value), capsys)
    assert_one_line(rc, err, seconds)
    if value in NEVER:
        assert rc == 2, (rc, err)
    assert rc in (0, 1, 2), rc


UNKNOWN = [["nope"], ["memory", "--params", "7e9", "--bogus", "1"],
           ["memory", "--params", "7e9", "--strategy", "nope"],
           ["comm", "--params", "7e9", "--strategy", "nope"],
           ["comm", "--params", "7e9", "--link", "smoke-signal"],
           ["plan", "--params", "7e9", "--gpus", "8", "--batch", "64",
            "--gpu", "nope"],
           ["plan", "--params", "7e9", "--gpus", "8", "--batch", "64",
            "--intra-link", "nope"],
           ["pipeline", "--schedule", "nope", "--stages", "2",
            "--microbatches", "4"],
           ["dryrun", "--profile", "nope"], ["dryrun", "--only", "nope",
                                              "--profile", "cpu"],
           ["preflight", "--profile", "nope"], ["profile"], [""]]


@pytest.mark.parametrize("argv", UNKNOWN, ids=[" ".join(a) for a in UNKNOWN])
def test_unknown_names(argv, capsys):
    rc, err, seconds = run(argv, capsys)
    assert rc == 2, err
    assert_one_line(rc, err, seconds)


def broken_files(tmp: Path) -> dict:
    (tmp / "dir").mkdir()
    os.mkfifo(tmp / "fifo")
    good = {"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": 1,
                             "pid": 0, "tid": 0}]}
    text = json.dumps(good)
    files = {"dir": tmp / "dir", "fifo": tmp / "fifo",
             "devnull": Path("/dev/null"), "missing": tmp / "none.json"}
    for name, data in {"truncated": text[:len(text) // 2].encode(),
                       "garbage": os.urandom(4096), "empty": b"",
                       "nested": b"[" * 200_000 + b"]" * 200_000,
                       "deep_dict": b'{"a":' * 100_000 + b"1" +
                       b"}" * 100_000,
                       "list": b"[1, 2, 3]", "wrong_shape":
                       b'{"traceEvents": 5}', "nan": b"NaN"}.items():
        p = tmp / f"{name}.json"
        p.write_bytes(data)
        files[name] = p
    gz = tmp / "bad.json.gz"
    gz.write_bytes(gzip.compress(text.encode())[:20])
    files["truncated_gz"] = gz
    return files


BROKEN = ["dir", "fifo", "devnull", "missing", "truncated", "garbage",
          "empty", "nested", "deep_dict", "list", "wrong_shape", "nan",
          "truncated_gz"]


@pytest.mark.parametrize("name", BROKEN)
def test_profile_of_a_broken_file(name, tmp_path, capsys):
    path = broken_files(tmp_path)[name]
    for argv in (["profile", str(path)], ["profile", str(path), "--json"]):
        rc, err, seconds = run(argv, capsys)
        assert rc == 2, (name, err)
        assert_one_line(rc, err, seconds)


def test_a_plot_to_a_missing_folder_or_a_folder(tmp_path, capsys):
    for target in (tmp_path / "no" / "x.png", tmp_path):
        rc, err, seconds = run(["pipeline", *BASE["pipeline"], "--plot",
                                str(target)], capsys)
        assert rc == 2 and "--plot" in err
        assert_one_line(rc, err, seconds)


def test_work_that_would_explode_is_refused_fast(capsys):
    for argv in (["pipeline", "--schedule", "1f1b", "--stages", "64",
                  "--microbatches", "100000"],
                 ["plan", "--params", "7e9", "--gpus", "8", "--batch",
                  str(10 ** 12)],
                 ["plan", "--params", "7e9", "--gpus", str(10 ** 9),
                  "--batch", "64"],
                 ["dryrun", *BASE["dryrun"][:-2], "--vocab", "256",
                  "--layers", str(10 ** 9)],
                 ["memory", "--params", "7e9", "--gpus", str(10 ** 9)],
                 ["memory", "--params", "7e9", "--shard-group", "0"]):
        rc, err, seconds = run(argv, capsys)
        assert rc == 2 and seconds < 5, (argv, err, seconds)
        assert_one_line(rc, err, seconds)


def test_sizes_inside_the_limits_are_bounded_by_their_work(tmp_path,
                                                          capsys):
    """Each value inside its flag's limits, their product beyond the
    command's work bound: refused in one line before the work starts."""
    big = tmp_path / "big.json"
    cfg = json.loads((ROOT / "tests" / "data" / "hf_configs" /
                      "llama3-8b.json").read_text())
    big.write_text(json.dumps(dict(cfg, num_hidden_layers=10 ** 5)))
    for argv, said in (
            (["plan", "--batch", str(2 ** 24), "--gpus", str(2 ** 20),
              "--hf-config", str(big)], "pipeline stages"),
            (["plan", "--batch", str(2 ** 24), "--gpus", str(2 ** 20),
              "--layers", str(10 ** 5), "--hidden", "16384", "--heads",
              "128", "--seq", "8192", "--vocab", "128000"],
             "pipeline stages"),
            (["pipeline", "--schedule", "1f1b", "--stages", "4096",
              "--microbatches", "48", "--plot", str(tmp_path / "p.png")],
             "operations to draw"),
            (["dryrun", "--layers", "128", "--hidden", "8192", "--heads",
              "64", "--vocab", "128000", "--seq", "8192", "--gpus",
              "1024"], "layer shards"),
            (["dryrun", "--hf-config", str(big), "--seq", "2048"],
             "layers"),
            (["dryrun", "--hf-config", str(ROOT / "tests" / "data" /
                                           "hf_configs" / "llama3-70b.json"),
              "--seq", "2048", "--gpus", "1024"], "layer shards")):
        rc, err, seconds = run(argv, capsys)
        assert rc == 2 and said in err, (argv, err)
        assert_one_line(rc, err, seconds)
        assert seconds < 30, (argv, seconds)
    assert not (tmp_path / "p.png").exists()


def test_an_error_inside_a_command_is_one_line(monkeypatch, capsys):
    from labkit.predict.model import flops
    for exc in (MemoryError(), RecursionError("deep"), ZeroDivisionError(
            "division by zero"), OSError(28, "No space left on device",
                                         "/x/y"), KeyError("k")):
        def boom(args, exc=exc):
            raise exc
        monkeypatch.setattr(flops, "main", boom)
        rc, err, seconds = run(["flops", *BASE["flops"]], capsys)
        assert rc == 2
        assert_one_line(rc, err, seconds)
    assert "disk full at /x/y" in cli_rules.one_line(
        OSError(28, "No space left on device", "/x/y"))


def test_the_time_limit_says_so(capsys, monkeypatch):
    from labkit.predict.model import flops
    monkeypatch.setattr(flops, "main", lambda a: time.sleep(5))
    os.environ["LABKIT_CLI_TIMEOUT_S"] = "0.5"
    try:
        rc = cli.main(["flops", *BASE["flops"]])
    finally:
        os.environ.pop("LABKIT_CLI_TIMEOUT_S")
    assert rc == 2 and "no answer after 0.5 s" in capsys.readouterr().err


def test_a_subprocess_prints_one_line_and_no_traceback(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    for argv in (["profile", str(deep)], ["dryrun", "--gpus", "0"],
                 ["memory", "--params", "nan"]):
        r = subprocess.run([sys.executable, "-m", "labkit", *argv],
                           capture_output=True, text=True, timeout=BOUND_S,
                           cwd=ROOT)
        assert r.returncode == 2, r.stderr
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
