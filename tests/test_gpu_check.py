"""scripts/gpu_check.py --dry (what `make gpu-check DRY=1` runs): the plan
within the 9-minute budget, the CPU-safe steps run here, everything under
one folder; the deadline, the killed process group, the archive rewritten
after every step (read after a kill midway); and scripts/gpu_wheels.py's
list for a bare GPU machine."""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load(name):
    spec = importlib.util.spec_from_file_location(
        name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod          # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


gc = _load("gpu_check")


def test_plan_fits_the_budget_and_every_step_has_a_timeout(tmp_path):
    plan = gc.steps(tmp_path)
    assert sum(s.est_s for s in plan) <= gc.BUDGET_S == 540
    assert all(0 < s.est_s <= s.timeout_s for s in plan)
    names = [s.name for s in plan]
    for must in ("versions", "preflight_gpu1", "preflight_gpu8", "zero",
                 "lab_memory", "lab_profiling", "checkpoint", "benchmark",
                 "benchmark_compile"):
        assert must in names
    lab1 = next(s for s in plan if s.name == "lab_memory").cmd
    assert lab1[-6:-2] == ["gpu1", "--only", "memory", "--out"] or \
        ["--profile", "gpu1", "--only", "memory"] == lab1[2:6]


def test_dry_run_prints_the_plan_and_runs_the_cpu_safe_steps(tmp_path):
    out = tmp_path / "gc"
    r = subprocess.run([sys.executable, str(ROOT / "scripts" /
                                            "gpu_check.py"), "--dry",
                        "--deadline", "300",
                        "--out", str(out), "--archive",
                        str(tmp_path / "gc.tar.gz")],
                       capture_output=True, text=True, timeout=600,
                       cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "total" in r.stdout and "GPU only" in r.stdout
    s = json.loads((out / "summary.json").read_text())
    assert s["dry"] and s["est_total_s"] <= 540
    status = {x["step"]: x["status"] for x in s["steps"]}
    assert status["versions"] == status["zero"] == "ok"
    assert status["checkpoint"] == "ok"          # kill, resume, bit for bit
    ck = json.loads((out / "checkpoint.json").read_text())
    assert ck["run"]["attempt"] == 1 and ck["largest_difference"] == 0.0
    assert status["preflight_gpu1"] == status["preflight_gpu8"] == "ok"
    assert status["lab_memory"] == status["benchmark"] == "planned"
    assert s["versions"]["torch"] and "nvidia_smi" in s["versions"]
    # lab 4's rule at one rank, every ZeRO stage and the offloads
    rows = json.loads((out / "zero.json").read_text())["rows"]
    assert {x["variant"] for x in rows} == set(gc.ZERO_VARIANTS)
    assert all(x["explained"] for x in rows)
    assert all((out / f"{n}.log").is_file() for n in status
               if status[n] == "ok")
    assert s["finished"] and s["deadline_s"] == 300 and not s["skipped"]
    names = _archived(tmp_path / "gc.tar.gz")
    assert "gc/summary.json" in names and "gc/zero.log" in names


def test_wheels_for_a_bare_gpu_machine_leave_torch_alone(tmp_path):
    gw = _load("gpu_wheels")
    need = gw.needed()
    for name in ("deepspeed", "papermill", "ipykernel", "nbformat"):
        assert name in need
    for name in ("torch", "numpy", "triton", "jupyterlab"):
        assert name not in need
    assert gc.install_wheels(tmp_path, wheels=tmp_path / "none") == {}


def _archived(path):
    """The archive's member names; it is flat (<= 2 folders) and small."""
    assert path.stat().st_size <= 16 * 2**20
    with tarfile.open(path) as tar:
        names = tar.getnames()
    assert all(n.count("/") <= 2 for n in names), names
    return names


def _sh(name, script, est=0.1, timeout=100):
    return gc.Step(name, est, timeout, ["sh", "-c", script])


def _alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_deadline_skips_what_no_longer_fits_and_kills_the_group(
        tmp_path, capsys):
    """A step that would outlast the deadline is stopped at it, its whole
    process group with it (the grandchild too); a step whose estimate no
    longer fits is skipped and listed; a failing step's log tail is
    printed. Sleeps of 60 s against an 8 s deadline: holds at any speed."""
    from gpucheck import runner
    out = tmp_path / "gc"
    plan = [_sh("fine", "echo fine"),
            _sh("fails", "echo boom; exit 3"),
            _sh("hangs", f"sleep 60 & echo $! > {tmp_path}/child; sleep 60"),
            _sh("too_long", "echo never", est=1000)]
    s = runner.run(out, plan, False, 8.0, tmp_path / "a.tgz", dict(os.environ))
    status = {r["step"]: r["status"] for r in s["steps"]}
    assert status == {"fine": "ok", "fails": "failed", "hangs": "timeout",
                      "too_long": "skipped"}
    assert s["skipped"] == ["too_long"] and s["finished"]
    hangs = next(r for r in s["steps"] if r["step"] == "hangs")
    assert hangs["timeout_s"] < 8.0 and hangs["seconds"] < 60
    assert not _alive(int((tmp_path / "child").read_text()))
    printed = capsys.readouterr().out
    assert "boom" in printed and "last 20 lines" in printed
    assert "gc/fails.log" in _archived(tmp_path / "a.tgz")


def test_a_crash_is_not_a_finding(tmp_path):
    """Preflight's exits 1 and 2 are findings; a traceback (exit 1 too, as
    with no torch on the machine's Python) is a failure."""
    from gpucheck import runner
    crash = gc.Step("crash", 0.1, 30, [sys.executable, "-c",
                                        "import no_such_module_here"],
                    ok_exits=(0, 1, 2))
    finding = gc.Step("finding", 0.1, 30, [sys.executable, "-c",
                                            "raise SystemExit(2)"],
                      ok_exits=(0, 1, 2))
    s = runner.run(tmp_path / "gc", [crash, finding], False, 60.0, None,
                   dict(os.environ))
    assert [r["status"] for r in s["steps"]] == ["failed", "ok"]


def test_killed_midway_the_archive_and_summary_are_there(tmp_path):
    """The real dry run, SIGKILLed while its second step runs: the summary
    and the archive of the steps finished so far are there and readable."""
    out, arc = tmp_path / "gc", tmp_path / "gc.tgz"
    p = subprocess.Popen([sys.executable, str(ROOT / "scripts" /
                                              "gpu_check.py"), "--dry",
                          "--deadline", "300", "--out", str(out),
                          "--archive", str(arc)], cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                s = json.loads((out / "summary.json").read_text())
            except (FileNotFoundError, ValueError):
                s = {}
            if s.get("steps") and s.get("running"):
                break                      # one step done, the next runs
            assert p.poll() is None, "the check ended before it was killed"
            time.sleep(0.2)
        else:
            pytest.fail("the check never finished a step")
        p.kill()
        p.wait()
    finally:
        if p.poll() is None:
            p.kill()
    step = s["running"]["step"]
    s = json.loads((out / "summary.json").read_text())
    assert s["steps"][0]["step"] == "versions" and not s["finished"]
    assert s["steps"][0]["status"] == "ok"
    with tarfile.open(arc) as tar:
        inside = json.load(tar.extractfile("gc/summary.json"))
        assert "gc/versions.log" in tar.getnames()
    assert inside["steps"][0]["status"] == "ok"
    _archived(arc)
    # the running step's process dies with the check (PR_SET_PDEATHSIG)
    t = time.monotonic() + 30
    while _alive(s["running"]["pgid"]) and time.monotonic() < t:
        time.sleep(0.2)
    assert not _alive(s["running"]["pgid"]), step
    try:
        os.killpg(s["running"]["pgid"], signal.SIGKILL)   # any leftovers
    except ProcessLookupError:
        pass


def test_the_archive_drops_traces_first_and_stays_flat(tmp_path):
    from gpucheck import archive as A
    out = tmp_path / "gc"
    deep = out / "labs" / "profiling" / "ddp"
    deep.mkdir(parents=True)
    (deep / "rank-0.json.gz").write_bytes(os.urandom(600_000))
    (deep / "notes.log").write_text("a finding\n")
    (out / "big.json").write_bytes(b"x" * 200_000)
    (out / "step.log").write_text("ok\n")
    summary = {"steps": []}
    A.write(out, summary, tmp_path / "a.tgz", limit=256 * 1024 + 300_000)
    dropped = summary["archive"]["dropped"]
    assert dropped == ["labs/profiling/ddp/rank-0.json.gz"]
    names = _archived(tmp_path / "a.tgz")
    assert "gc/labs/profiling__ddp__notes.log" in names
    assert "gc/big.json" in names and "gc/step.log" in names
    saved = json.loads((out / "summary.json").read_text())
    assert saved["archive"]["dropped"] == dropped


def _wheel(folder, name="tinypkg", version="1.0"):
    """A minimal pure-Python wheel (no network, no build)."""
    import zipfile
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    di = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}/__init__.py", "X = 1\n")
        z.writestr(f"{di}/METADATA", f"Metadata-Version: 2.1\nName: {name}"
                   f"\nVersion: {version}\n")
        z.writestr(f"{di}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\n"
                   "Root-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{di}/RECORD", "")
    return path


def test_the_wheels_are_installed_once(tmp_path, monkeypatch):
    from gpucheck import wheels as W
    whl, site = tmp_path / "whl", tmp_path / "site"
    _wheel(whl)
    env = W.install_wheels(tmp_path / "run1", whl, site)
    assert (site / "tinypkg" / "__init__.py").is_file()
    assert env == {"LABKIT_GPU_CHECK_SITE": str(site)}

    def no_pip(*a, **k):
        raise AssertionError("pip ran again")
    monkeypatch.setattr(W.subprocess, "run", no_pip)
    assert W.install_wheels(tmp_path / "run2", whl, site) == env
    assert json.loads((tmp_path / "run2" / "wheels.json").read_text())[
        "installed_now"] is False


def test_gpu_wheels_keeps_one_current_wheel_per_package(tmp_path):
    """Issue 28 ("likely"): stale versions were left beside the new ones
    (pip then refuses two versions of one package)."""
    gw = _load("gpu_wheels")
    for n in ("deepspeed-0.19.7-py3-none-any.whl",
              "deepspeed-0.19.8-py3-none-any.whl",
              "hjson-3.1.0-py3-none-any.whl",
              "gone_pkg-1.0-py3-none-any.whl"):
        (tmp_path / n).write_bytes(b"")
    removed = gw.prune({"deepspeed": "0.19.8", "hjson": "3.1.0"}, tmp_path)
    assert removed == ["deepspeed-0.19.7-py3-none-any.whl",
                       "gone_pkg-1.0-py3-none-any.whl"]
    assert sorted(p.name for p in tmp_path.glob("*.whl")) == [
        "deepspeed-0.19.8-py3-none-any.whl", "hjson-3.1.0-py3-none-any.whl"]


@pytest.mark.parametrize("name,fits", [
    ("deepspeed-0.19.8-py3-none-any.whl", True),
    ("pydantic_core-2.41.5-cp312-cp312-manylinux_2_17_x86_64."
     "manylinux2014_x86_64.whl", True),
    ("pyzmq-27.1.0-cp312-abi3-manylinux_2_28_x86_64.whl", True),
    ("psutil-7.0.0-cp36-abi3-manylinux_2_12_x86_64.whl", True),
    ("foo-1.0-cp311-cp311-linux_x86_64.whl", False),      # the host's
    ("foo-1.0-cp312-cp312-macosx_11_0_arm64.whl", False)])
def test_a_wheel_must_fit_the_gpu_machines_python(name, fits):
    gw = _load("gpu_wheels")
    assert gw.fits_312(Path(name)) is fits


def test_a_source_build_for_the_host_python_is_refused(tmp_path,
                                                       monkeypatch):
    """pip wheel builds with this machine's Python: a compiled cp311 wheel
    would not install on the GPU machine's 3.12; it is removed and named."""
    gw = _load("gpu_wheels")

    class R:
        returncode = 1                     # no binary wheel on PyPI

    def fake_run(cmd, **kw):
        if "wheel" in cmd:
            (tmp_path / "foo-1.0-cp311-cp311-linux_x86_64.whl").write_bytes(
                b"")
            return None
        return R()
    monkeypatch.setattr(gw.subprocess, "run", fake_run)
    with pytest.raises(SystemExit, match="only as source.*3.12"):
        gw.download({"foo": "1.0"}, tmp_path)
    assert list(tmp_path.glob("*.whl")) == []


def test_a_compiled_source_build_is_rebuilt_by_python_312(tmp_path,
                                                         monkeypatch):
    """Issue 28: the source fallback built for the host Python. A compiled
    wheel for this Python is removed and the package built again by a
    CPython 3.12; the folder ends with the one wheel that fits 3.12 (an
    earlier build's and an older version's are gone)."""
    gw = _load("gpu_wheels")
    for n in ("foo-0.9-py3-none-any.whl",                # stale version
              "foo-1.0-cp311-cp311-linux_x86_64.whl"):   # an earlier build
        (tmp_path / n).write_bytes(b"")
    calls = []

    class R:
        def __init__(self, rc, out=""):
            self.returncode, self.stdout = rc, out

    def fake_run(cmd, **kw):
        calls.append(cmd[0])
        if "download" in cmd:
            return R(1)                    # no binary wheel on PyPI
        if "-c" in cmd:                    # the 3.12 probe
            return R(0, "True")
        if "wheel" in cmd:
            tag = "cp312" if cmd[0] == "/opt/py312" else "cp311"
            (tmp_path / f"foo-1.0-{tag}-{tag}-linux_x86_64.whl"
             ).write_bytes(b"")
        return R(0)
    monkeypatch.setenv("GPU_WHEELS_PYTHON", "/opt/py312")
    monkeypatch.setattr(gw.subprocess, "run", fake_run)
    monkeypatch.setattr(gw.Path, "is_file", lambda self: True)
    gw.download({"foo": "1.0"}, tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.whl")) == [
        "foo-1.0-cp312-cp312-linux_x86_64.whl"]
    assert calls.count("/opt/py312") == 2      # probed, then built
