"""The lab runner: names, profiles, keeping earlier runs, GPU cells."""
import importlib.util
import time
from pathlib import Path

import nbformat
import pytest
import yaml
from papermill.inspection import inspect_notebook

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("run_labs",
                                              ROOT / "scripts" / "run_labs.py")
run_labs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_labs)
LABS = run_labs.discover()


def test_lab_names():
    assert run_labs.lab_name(Path("labs/01_memory.ipynb")) == "memory"
    assert "memory" in LABS


def test_keep_previous_never_overwrites(tmp_path):
    d = tmp_path / "memory"
    d.mkdir()
    (d / "results.json").write_text("[1]")
    kept = run_labs.keep_previous(d)
    assert not d.exists() and (kept / "results.json").read_text() == "[1]"
    d.mkdir()
    kept2 = run_labs.keep_previous(d)
    assert kept2 != kept and kept.exists()


def test_gpu_cells_are_shown_not_run(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1"),
                nbformat.v4.new_code_cell("import torch; torch.cuda.init()")]
    nb.cells[1].metadata["tags"] = ["gpu"]
    src, dest = tmp_path / "a.ipynb", tmp_path / "b.ipynb"
    nbformat.write(nb, src)
    assert run_labs.skip_gpu_cells(src, dest) == 1
    out = nbformat.read(dest, 4)
    assert out.cells[1].cell_type == "markdown"
    assert "torch.cuda.init()" in out.cells[1].source


def _params(nb: Path) -> dict:
    return inspect_notebook(str(nb))


@pytest.mark.parametrize("name", sorted(LABS))
def test_every_lab_has_profile_and_results_dir(name):
    p = _params(LABS[name])
    assert p["profile"]["default"] == '"cpu"'
    assert p["results_dir"]["default"] == "None"


@pytest.mark.parametrize("profile", ["cpu", "gpu1", "gpu8"])
def test_profiles_name_real_labs_and_parameters(profile):
    prof = yaml.safe_load((ROOT / "labs" / "profiles" / f"{profile}.yaml")
                          .read_text())
    # the one key beside the labs: the node a GPU profile is written for
    node = prof.pop("node", None)
    assert node == (None if profile == "cpu" else
                    {"gpus": int(profile[3:])})
    assert set(prof) == set(LABS), "one section per lab"
    for name, params in prof.items():
        known = set(_params(LABS[name]))
        assert set(params or {}) <= known, (name, set(params) - known)
        assert params["profile"] == profile


@pytest.mark.parametrize("name", sorted(LABS))
def test_cpu_profile_equals_notebook_defaults(name):
    """nbval runs the defaults; the runner runs cpu.yaml: they must agree."""
    import ast
    prof = yaml.safe_load((ROOT / "labs" / "profiles" / "cpu.yaml")
                          .read_text())[name]
    defaults = _params(LABS[name])
    for key, value in prof.items():
        assert ast.literal_eval(defaults[key]["default"]) == value, key


@pytest.mark.parametrize("argv,message", [
    (["--profile", "cpu", "--only", "nonexistent"], "unknown lab"),
    (["--profile", "tpu64"], "unknown profile 'tpu64'"),
    (["--profile", "gpu8", "--plan", "--price-per-hour", "-3"],
     "--price-per-hour must be >= 0"),
])
def test_bad_input_is_one_clear_line_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        run_labs.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and message in err[-1]


def test_plan_prints_every_lab_and_runs_nothing(monkeypatch, capsys):
    import subprocess
    import psutil

    def no_process(*a, **k):
        raise AssertionError("--plan started a process")
    monkeypatch.setattr(subprocess.Popen, "__init__", no_process)
    monkeypatch.setattr(run_labs, "run_lab", no_process)
    before = psutil.Process().children(recursive=True)
    assert run_labs.main(["--profile", "gpu8", "--plan",
                          "--price-per-hour", "24"]) == 0
    assert psutil.Process().children(recursive=True) == before
    out = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split() for line in out if line.split()}

    def span(text):          # "1.2-3.4" (a GPU plan's range), "$0.5-1.4"
        return [float(x) for x in text.lstrip("$").replace(",", "")
                .split("-")]
    for name in [*LABS, "node", "total"]:
        assert name in rows, name
        (lo, hi), cost = span(rows[name][-2]), span(rows[name][-1])
        assert 0 < lo < hi and cost[0] < cost[1]
    for end in (0, 1):     # the total: the labs and the node's set-up
        total = sum(span(rows[n][-2])[end] for n in [*LABS, "node"])
        assert span(rows["total"][-2])[end] == pytest.approx(total, abs=1.0)
        assert span(rows["total"][-1])[end] == pytest.approx(
            span(rows["total"][-2])[end] / 60 * 24, abs=0.05)
    assert "nothing was run" in out[-1] and "largest uncertainty" in out[-1]


def test_gpu1_plan_prices_only_the_labs_its_gpu_runs(capsys):
    """gpu1's node has one GPU (``node: {gpus: 1}``): the plan prices the
    labs the runner would start there, names the others, and its total
    is theirs and the set-up's."""
    assert run_labs.main(["--profile", "gpu1", "--plan"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split() for line in out if line.split()}
    runs = {"memory", "profiling", "precision", "roofline"}
    assert runs <= set(rows) and not set(rows) & (set(LABS) - runs)
    skipped = next(line for line in out if line.startswith("not priced"))
    assert all(f"{n} (needs" in skipped for n in set(LABS) - runs)
    est = run_labs.labtime.plan(run_labs.load_profile("gpu1"), True,
                                sorted(runs))
    lo, hi = run_labs.labtime.setup(True)
    total = [float(x) for x in rows["total"][-1].split("-")]
    assert total == pytest.approx(
        [(lo + sum(e.low for e in est.values())) / 60,
         (hi + sum(e.high for e in est.values())) / 60], abs=0.05)
    assert run_labs.preflight.profile_gpus("gpu8") == 8
    assert run_labs.preflight.profile_gpus("cpu") is None


def test_failing_preflight_stops_the_run(monkeypatch, capsys):
    """A lab would fail: exit 2 before any lab starts; the summary goes to
    the kernels' environment (LABKIT_PREFLIGHT) when the run goes on."""
    import os
    from labkit.preflight import Check
    started = []
    monkeypatch.setattr(run_labs, "run_lab",
                        lambda *a, **k: started.append(a) or ("ok", 0, ""))
    monkeypatch.setattr(run_labs.preflight, "run", lambda name: [
        Check("gpus", "fail", "0 CUDA GPUs", "8", "get a GPU node")])
    assert run_labs.main(["--profile", "gpu8"]) == 2 and not started
    assert "preflight failed: gpus" in capsys.readouterr().err
    monkeypatch.setattr(run_labs.preflight, "run", lambda name: [
        Check("cpu cores", "ok", "2 cores")])
    monkeypatch.delenv("LABKIT_PREFLIGHT", raising=False)
    assert run_labs.main(["--profile", "cpu", "--only", "memory"]) == 0
    assert len(started) == 1
    assert '"status": "ok"' in os.environ.pop("LABKIT_PREFLIGHT")


def _kind(v):
    return "number" if isinstance(v, (int, float)) and not isinstance(
        v, bool) else type(v).__name__


# a value a lab takes as a number or a word: lab 12's rate is "measured"
# on the CPU (its notebook's default), FLOP/s on a GPU profile
EITHER = {"flops_per_s": {"number", "str"}}


@pytest.mark.parametrize("profile", ["gpu1", "gpu8"])
@pytest.mark.parametrize("name", sorted(LABS))
def test_gpu_profiles_parse_against_the_notebook(profile, name):
    """A dry run of the GPU profiles (no GPU here): every value has the
    kind of the notebook's default (None defaults take anything)."""
    import ast
    prof = yaml.safe_load((ROOT / "labs" / "profiles" / f"{profile}.yaml")
                          .read_text())[name]
    defaults = _params(LABS[name])
    for key, value in prof.items():
        default = ast.literal_eval(defaults[key]["default"])
        if key in EITHER:
            assert _kind(value) in EITHER[key], (key, value)
        elif default is not None and value is not None:
            assert _kind(value) == _kind(default), (key, value, default)
        if isinstance(default, dict):
            assert set(value) == set(default), key


def test_gpu1_runs_one_gpu_labs_and_notes_the_others():
    prof = run_labs.load_profile("gpu1")
    need = {name: run_labs.gpus_needed(p) for name, p in prof.items()}
    # precision: its ranks are gloo processes on the CPU (NCCL refuses two
    # ranks on one GPU), its CUDA cells use the one GPU; roofline: one
    # process measures the GPU (no link to measure on one); hangs: three
    # ranks, so that every tool's culprit is a majority's
    assert need == {n: 1 if n in ("memory", "profiling", "precision",
                                  "roofline")
                    else 3 if n == "hangs" else 2 for n in LABS}


def test_labs_needing_more_gpus_are_skipped_with_a_note(capsys,
                                                        monkeypatch):
    import os
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    monkeypatch.setattr(run_labs, "cuda_device_count", lambda: 0)
    monkeypatch.setattr(run_labs, "run_lab", lambda *a: pytest.fail("ran"))
    assert run_labs.main(["--profile", "gpu1", "--skip-preflight"]) == 0
    out = capsys.readouterr().out
    assert out.count("skipped") >= len(LABS)
    assert "needs >= 2 GPUs, 0 visible" in out
    assert "needs >= 1 GPUs, 0 visible" in out


def test_preflight_skips_one_lab_and_another_runs_its_fallback(
        capsys, monkeypatch, tmp_path):
    """Issue 47: nvcc missing skips lab 9 alone, with the reason in the
    summary; a GPU without FP8 cores runs lab 14 with fp8: emulated."""
    import os
    from labkit.preflight import Check
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    monkeypatch.setattr(run_labs, "cuda_device_count", lambda: 8)
    monkeypatch.setattr(run_labs.preflight, "run", lambda name: [
        Check("nvcc", "skip", "no CUDA_HOME and no nvcc", "nvcc 12",
              "install CUDA 12.4", lab="colossalai"),
        Check("compute capability", "warn", "sm_80", "sm_89+", "emulated",
              lab="precision", fallback={"fp8": "emulated"})])
    ran = {}

    def run_lab(name, nb, profile, params, *rest):
        ran[name] = params
        return "ok", 0.0, ""
    monkeypatch.setattr(run_labs, "run_lab", run_lab)
    assert run_labs.main(["--profile", "gpu8", "--out", str(tmp_path),
                          "--only", "colossalai", "--only",
                          "precision"]) == 0
    out = capsys.readouterr().out
    assert list(ran) == ["precision"] and ran["precision"]["fp8"] == \
        "emulated"
    assert "1 passed, 0 failed, 1 skipped" in out
    assert "colossalai: skipped (preflight: nvcc: no CUDA_HOME and no " \
        "nvcc; install CUDA 12.4)" in out
    assert "LABKIT_STALL_S" not in os.environ or os.environ[
        "LABKIT_STALL_S"] != "300.0"


def test_the_stall_limit_is_longer_on_gpu_profiles():
    from labkit.launch import heartbeat
    assert heartbeat.profile_stall_s("cpu") == heartbeat.STALL_S == 30.0
    assert heartbeat.profile_stall_s("gpu8") == 300.0
    assert heartbeat.profile_stall_s("gpu1") == 300.0


# -- killed runs: nothing keeps running, nothing good is lost ---------------

FAKE_LAB = [
    'profile = "cpu"\nresults_dir = None',
    "import os\nfrom labkit.lab import Results\n"
    'res = Results("fake", profile=profile, results_dir=results_dir)\n'
    'res.add("fake", "test data, not a measurement", 1, 1.0, 1.0, "s")\n'
    'if os.environ.get("FAKE_LAB_HANG"):\n'
    "    from labkit.launch import launch\n"
    '    launch("labkit.runs.tools.selftest", 2, {"mode": "hang"}, timeout=600,\n'
    '           run_dir=os.path.join(results_dir, "run"))\n'
    "res.save()",
]


def _runner(labs: Path, out: Path, hang: bool):
    import os
    import subprocess
    import sys
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("FAKE_LAB_HANG", None)
    if hang:
        env["FAKE_LAB_HANG"] = "1"
    return subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "run_labs.py"), "--labs",
         str(labs), "--out", str(out), "--only", "fake",
         "--skip-preflight"], env=env, cwd=ROOT, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.distributed
def test_killed_rerun_leaves_nothing_running_and_keeps_the_last_run(
        tmp_path, capsys):
    """A complete run of a tiny lab, then a rerun that hangs in a launch,
    its runner killed (SIGTERM in one folder, SIGKILL in another): within
    10 s no process of it lives; the interrupted run is kept and labelled;
    the bundle and the book use the complete run and say so."""
    import signal
    import psutil
    from test_launch_guard import gone_within, wait_until_hanging
    from labkit.measure.hang import orphans
    labs = tmp_path / "labs"
    labs.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in FAKE_LAB]
    nb.cells[0].metadata["tags"] = ["parameters"]
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python",
                                 "display_name": "Python 3"}
    nb.metadata["language_info"] = {"name": "python"}
    nbformat.write(nb, labs / "01_fake.ipynb")
    outs = {signal.SIGTERM: tmp_path / "term",
            signal.SIGKILL: tmp_path / "kill"}
    for p in [_runner(labs, out, hang=False) for out in outs.values()]:
        assert p.wait(timeout=300) == 0, p.stdout.read()
    runners = {sig: _runner(labs, out, hang=True) for sig, out in outs.items()}
    try:
        runs = {}
        for sig, out in outs.items():
            deadline = time.monotonic() + 120
            while not list((out / "cpu").glob("fake.*.running/run/logs")):
                assert time.monotonic() < deadline, "the rerun never started"
                time.sleep(0.5)
            runs[sig] = next((out / "cpu").glob("fake.*.running/run"))
            wait_until_hanging(runs[sig])
        assert all(orphans(str(r)) for r in runs.values())
        tree = [c for p in runners.values()
                for c in psutil.Process(p.pid).children(recursive=True)]
        for sig, p in runners.items():
            p.send_signal(sig)
        for p in runners.values():
            p.wait(timeout=60)
        gone = gone_within(runs.values())
        print("seconds until every process was gone:", gone)
        assert all(v is not None for v in gone.values()), gone
        assert not [c.pid for c in tree if c.is_running()
                    and c.status() != psutil.STATUS_ZOMBIE]
    finally:
        for p in runners.values():
            p.kill()
    term, kill = (outs[s] / "cpu" for s in (signal.SIGTERM, signal.SIGKILL))
    # the runs, labelled by the runner; runner.log (labfaults.runner_log)
    # is there when nbclient or asyncio logged something as the kernel
    # died, which depends on the machine's load (a CI run saw it)
    assert [d.name.split(".")[-1] for d in sorted(term.iterdir())
            if d.name != "runner.log"] == ["fake", "interrupted"]
    assert len(list(kill.glob("fake.*.running"))) == 1    # SIGKILL: no word
    for folder in (term, kill):                    # the complete run stays
        assert run_labs.labruns.status(folder / "fake") == "ok"
    bundle_results = _script("bundle_results")
    archive = tmp_path / "b.tar.gz"
    assert bundle_results.main(["--profile", "cpu", "--from", str(kill.parent),
                                "--out", str(archive)]) == 0
    said = capsys.readouterr().out
    assert "fake: the last complete run, fake/" in said
    assert "left out the newer run(s) fake." in said and "interrupted" in said
    assert len(list(kill.glob("fake.*.interrupted"))) == 1  # now labelled
    build_book = _script("build_book")
    folder, _ = build_book.unpack(archive, tmp_path / "_build")
    said = capsys.readouterr().out            # make book LABS_FROM=bundle
    assert "fake: the last complete run, fake/" in said and \
        "interrupted" in said
    executed, _ = build_book.executed_copy(folder, "fake", "01_fake.ipynb")
    assert run_labs.labruns.status(executed.parent) == "ok"
    executed, note = build_book.executed_copy(term, "fake", "01_fake.ipynb")
    assert executed.parent == term / "fake" and "interrupted" in note
    assert not orphans(str(runs[signal.SIGTERM]))


def _script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" /
                                                  f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
