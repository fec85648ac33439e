"""scripts/grading/jail.py, limits.py, seccomp.py, pipe.py: the walls
themselves, on tiny commands (no notebook): no process in a jail reads
or traces another, the writable space is bounded, one cgroup per
submission nested under ours, the pipe reader is linear and bounded."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from grading import jail as jails, limits, seccomp  # noqa: E402
from grading.pipe import Lines  # noqa: E402

JAIL = jails.choose()
needs_sandbox = pytest.mark.skipif(JAIL is None, reason="no bubblewrap")
PY = str(Path(sys.prefix).resolve() / "bin" / "python")

PEEK = r"""
import ctypes, os, subprocess, sys
if sys.argv[1] == "trusted":
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)       # what the grader does
kid = r'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
out = []
for f in ("/proc/1/fd/1", "/proc/1/mem", "/proc/1/environ"):
    try:
        open(f, "rb" if "fd" not in f else "w").close()
        out.append("OPEN " + f)
    except OSError:
        out.append("refused " + f)
r = libc.ptrace(16, 1, 0, 0)
out.append(f"ptrace {r} {ctypes.get_errno()}")
print(" | ".join(out))
'''
print(subprocess.run([sys.executable, "-c", kid], capture_output=True,
                     text=True).stdout.strip())
"""


def run_in(tmp_path, code, *args, trusted=False, box=None):
    work, course = tmp_path / "work", tmp_path / "course"
    work.mkdir(exist_ok=True)
    (course / "_build").mkdir(parents=True, exist_ok=True)
    p = JAIL.start([PY, "-c", code, *args], work=work, course=course,
                   env={"PATH": "/usr/bin:/bin"}, box=box, trusted=trusted)
    try:
        out = p.communicate(timeout=120)[0].decode()
    finally:
        JAIL.stop(p)
    return out


@needs_sandbox
def test_no_process_traces_or_reads_another(tmp_path):
    """issue 30 (1, 3): a trusted jail's PID 1 (the grader) is closed to
    its children; ptrace is refused in every jail (seccomp)."""
    trusted = run_in(tmp_path, PEEK, "trusted", trusted=True)
    assert "OPEN" not in trusted and "refused /proc/1/fd/1" in trusted
    assert "ptrace -1 1" in trusted, trusted
    untrusted = run_in(tmp_path, PEEK, "student")
    assert "ptrace -1 1" in untrusted, untrusted


def test_seccomp_program_shape():
    prog = seccomp.program("x86_64")
    assert prog and len(prog) % 8 == 0 and len(prog) // 8 == 10
    assert seccomp.program("sparc") is None


@needs_sandbox
def test_writable_space_is_bounded(tmp_path, monkeypatch):
    """issue 30 (6): every writable place is a tmpfs of DISK bytes."""
    monkeypatch.setattr(jails, "DISK", 32 << 20)
    code = r"""
import os
for top in (".", "/tmp", "/grading/course/_build"):
    n = 0
    try:
        for i in range(20):
            with open(os.path.join(top, f"f{i}"), "wb") as f:
                for _ in range(4):
                    f.write(b"x" * (1 << 20))
                    n += 1 << 20
    except OSError:
        pass
    print(top, n)
for top in ("/usr", "/grading/course", "/etc", "/", "/grading"):
    try:
        open(os.path.join(top, "x"), "w")
        print("WROTE", top)
    except OSError:
        pass
"""
    out = run_in(tmp_path, code)
    sizes = dict(ln.split() for ln in out.splitlines() if "WROTE" not in ln)
    assert len(sizes) == 3 and "WROTE" not in out, out
    assert all(int(n) <= 32 << 20 for n in sizes.values()), out
    assert not list((tmp_path / "work").iterdir())  # nothing reached host


@pytest.mark.skipif(not limits.probe(), reason="cgroups not writable")
def test_one_cgroup_per_submission_nested_under_ours():
    """issue 30 (6): the limits hold every jail of a submission together,
    inside the cgroup this process (make grade) runs in."""
    box = limits.Box.open(f"grade-test-{os.getpid()}")
    try:
        mem = next(d for d in box.dirs if "memory" in str(d) or
                   (d / "memory.max").exists())
        own = limits._own("memory") if "memory" in str(mem) else \
            limits._own("")
        assert str(mem).startswith(str(limits.CGROUP / "memory" /
                                       own.lstrip("/"))
                                   if "memory" in str(mem) else
                                   str(limits.CGROUP / own.lstrip("/")))
        a, b = box.cell("student"), box.cell("grader")
        assert all(x.parent in box.dirs for x in a + b)
        limit = (mem / "memory.limit_in_bytes") if (
            mem / "memory.limit_in_bytes").exists() else mem / "memory.max"
        assert int(limit.read_text()) == limits.MEMORY
    finally:
        box.close()
    assert not any(d.exists() for d in box.dirs)


# cgroup v2. This machine (a container) is hybrid: memory, pids and cpu
# are v1 hierarchies, and the v2 one (here at /sys/fs/cgroup/unified) has
# only what v1 left it (``cgroup.controllers``: hugetlb). A controller
# lives in one hierarchy at a time, so v2's memory.max / pids.max /
# cpu.max cannot be written here; the v2 path is tested on that real
# hierarchy as far as it goes: the refusal when a limit cannot be set, and
# the mechanics (nested under our own v2 cgroup, a cell per jail, every
# process in it killed, nothing left), with the limits narrowed to the
# controllers it has.
UNIFIED = next((p for p in (limits.CGROUP, limits.CGROUP / "unified")
                if (p / "cgroup.controllers").exists()), None)
needs_v2 = pytest.mark.skipif(
    UNIFIED is None or not os.access(UNIFIED, os.W_OK),
    reason="no writable cgroup v2 hierarchy")


def v2_controllers() -> set:
    return set((UNIFIED / "cgroup.controllers").read_text().split())


@needs_v2
def test_cgroup_v2_refuses_a_box_it_cannot_limit(monkeypatch):
    if {"memory", "pids", "cpu"} <= v2_controllers():
        pytest.skip("every controller is on v2 here: the test above ran")
    monkeypatch.setattr(limits, "CGROUP", UNIFIED)
    name = f"grade-v2-{os.getpid()}"
    assert limits.Box.open(name) is None   # not a box without its limits
    assert not list(UNIFIED.rglob(name))


@needs_v2
def test_cgroup_v2_box_nests_holds_and_kills(monkeypatch):
    monkeypatch.setattr(limits, "CGROUP", UNIFIED)
    full = limits.v2_limits()
    monkeypatch.setattr(limits, "v2_limits", lambda: {
        f: v for f, v in full.items()
        if f.partition(".")[0] in v2_controllers()})
    box = limits.Box.open(f"grade-v2-{os.getpid()}")
    assert box is not None and len(box.dirs) == 1
    d = box.dirs[0]
    own = UNIFIED / limits._own("").lstrip("/")
    assert d.parent == (own if box.nested else UNIFIED)
    try:
        cell = box.cell("student")[0]
        kids = [subprocess.Popen(
            ["sleep", "300"], preexec_fn=lambda: (
                cell / "cgroup.procs").write_text(str(os.getpid())))
            for _ in range(2)]
        assert sorted(cell.joinpath("cgroup.procs").read_text().split()) \
            == sorted(str(k.pid) for k in kids)
        assert "populated 1" in (d / "cgroup.events").read_text()
    finally:
        box.close()
    assert [k.wait(timeout=10) for k in kids] == [-9, -9]
    assert not d.exists()


def test_jobs_fit_in_memory():
    most = limits.jobs_that_fit(by_cores=False)
    assert most >= 1
    assert most * limits.MEMORY <= max(limits.total_memory(),
                                       limits.MEMORY)
    assert 1 <= limits.jobs_that_fit() <= most


def test_pipe_reader_lines_and_limit():
    r, w = os.pipe()
    with os.fdopen(r, "rb") as rf, os.fdopen(w, "wb") as wf:
        wf.write(b"one\ntwo\nthr")
        wf.flush()
        lines = Lines(rf)
        assert lines.readline(time.monotonic() + 5) == b"one"
        assert lines.readline(time.monotonic() + 5) == b"two"
        with pytest.raises(TimeoutError):
            lines.readline(time.monotonic() + 0.2)
        wf.write(b"ee\n")
        wf.flush()
        assert lines.readline(time.monotonic() + 5) == b"three"
    # a line over the limit is refused once the limit is passed
    big = subprocess.Popen([sys.executable, "-c",
                            "import sys; sys.stdout.buffer.write(b'x' * "
                            "(9 << 20))"], stdout=subprocess.PIPE)
    with pytest.raises(ValueError):
        Lines(big.stdout, limit=8 << 20).readline(time.monotonic() + 60)
    big.kill()
    big.wait()


@needs_sandbox
@pytest.mark.skipif(not limits.probe(), reason="cgroups not writable")
def test_a_jail_is_quiet_while_the_grader_measures(tmp_path):
    """issue 30 (7): lab 7's measurements run with the student's processes
    stopped (every process of its cgroup), resumed for calls."""
    from grading.session import quiet
    work, course = tmp_path / "w", tmp_path / "c"
    work.mkdir()
    (course / "_build").mkdir(parents=True)
    box = limits.Box.open(f"grade-quiet-{os.getpid()}")
    p = JAIL.start([PY, "-c", "import subprocess, sys, time\n"
                    "subprocess.Popen([sys.executable, '-c', "
                    "'while True: pass'])\ntime.sleep(60)"], work=work,
                   course=course, env={"PATH": "/usr/bin"}, box=box)
    try:
        time.sleep(1.5)
        pids = (p.cgroups[0] / "cgroup.procs").read_text().split()
        assert len(pids) >= 2
        quiet(p, True)
        time.sleep(0.3)
        states = [Path(f"/proc/{q}/stat").read_text().split(")")[1].split()[0]
                  for q in pids]
        assert set(states) == {"T"}, states
        quiet(p, False)
        time.sleep(0.3)
        states = [Path(f"/proc/{q}/stat").read_text().split(")")[1].split()[0]
                  for q in pids]
        assert "T" not in states, states
    finally:
        JAIL.stop(p)
        box.close()


def test_a_venv_under_tmp_is_not_hidden_by_the_jails_tmp(tmp_path):
    """bwrap mounts in the order given: the writable /tmp comes before the
    read-only binds of the venvs, so a checkout under /tmp (a fresh clone
    in /tmp, CI's folder...) keeps its Python inside the jail."""
    j = jails.Bubblewrap("bwrap")
    j.venvs = ["/tmp/some-clone/.venv"]
    (tmp_path / "nb.ipynb").write_text("{}")
    a = j.wrap(["python"], tmp_path, tmp_path, {}, False, [])
    tmp = next(i for i in range(len(a) - 1)
               if a[i] == "--tmpfs" and a[i + 1] == "/tmp")
    venv = next(i for i in range(len(a) - 1)
                if a[i] == "--ro-bind" and a[i + 1] == j.venvs[0])
    assert tmp < venv, a
