"""The box a submission runs in, chosen at run time: the strongest there is.

    jail = choose(unsafe=False)        # None: no sandbox on this machine
    proc = jail.start(cmd, work=..., course=..., env=...)
    ...
    jail.stop(proc)                    # every process it started is gone

``bubblewrap`` (``bwrap``, Debian package ``bubblewrap``; ``make setup``
installs it when root): new PID, network, mount, IPC and UTS namespaces.
The filesystem is a whitelist: the system's read-only ``/usr``, ``/etc``
basics, the Python and the virtual environments read-only, the course
package copy read-only at ``/grading/course`` (with a private writable
``_build``), a private writable ``/grading/work`` and ``/tmp``; nothing of
the checkout, ``_build/``, the answer keys, other submissions or the grades.
The network namespace has only loopback (torchrun with gloo still works).
When PID 1 of the namespace dies the kernel kills every process in it, so a
child that leaves its process group (or double-forks) dies too.

Limits: a cgroup per submission (memory, process count) where the cgroup
file system is writable (root), rlimits always (open files, file size, no
core dumps), and the caller's wall clock. ``rlimits`` alone (no namespaces)
is not a sandbox: ``grade.py`` refuses it unless ``--unsafe-no-isolation``.
Docker/Podman (``otter grade``) are not used: they need a daemon and images
that many instructors' machines and CI runners do not have.
"""
from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

MEMORY = 8 << 30          # bytes per submission (cgroup)
PIDS = 512                # processes and threads per submission (cgroup)
NOFILE = 4096
FSIZE = 2 << 30           # largest file a submission may write
CGROUP = Path("/sys/fs/cgroup")


def _cgroup_dirs(name: str) -> list[tuple[Path, dict]]:
    """Where to create the submission's cgroup, and its limit files."""
    if (CGROUP / "cgroup.controllers").exists():          # v2
        return [(CGROUP / name, {"memory.max": MEMORY, "pids.max": PIDS})]
    return [(CGROUP / "memory" / name, {"memory.limit_in_bytes": MEMORY}),
            (CGROUP / "pids" / name, {"pids.max": PIDS})]


def cgroups_writable() -> bool:
    probe = f"grade-probe-{os.getpid()}"
    made = []
    try:
        for d, limits in _cgroup_dirs(probe):
            d.mkdir()
            made.append(d)
            for f, v in limits.items():
                (d / f).write_text(str(v))
        return True
    except OSError:
        return False
    finally:
        for d in made:
            d.rmdir()


class Jail:
    name = "rlimits"
    sandboxed = False

    def __init__(self):
        self.cgroups = cgroups_writable()
        self._n = 0

    def describe(self) -> str:
        limits = (f"cgroup memory {MEMORY >> 30} GiB, pids {PIDS}; "
                  if self.cgroups else "no cgroup (not root?); ")
        return (f"{self.name} ({limits}rlimits nofile {NOFILE}, "
                f"fsize {FSIZE >> 30} GiB)")

    # -- per process --------------------------------------------------
    def _new_cgroup(self) -> list[Path]:
        if not self.cgroups:
            return []
        self._n += 1
        name = f"grade-{os.getpid()}-{self._n}"
        dirs = []
        for d, limits in _cgroup_dirs(name):
            d.mkdir()
            dirs.append(d)
            for f, v in limits.items():
                (d / f).write_text(str(v))
        return dirs

    def _preexec(self, dirs):
        def enter():
            for d in dirs:  # join before exec: no child can escape it
                (d / "cgroup.procs").write_text(str(os.getpid()))
            for r, v in ((resource.RLIMIT_NOFILE, NOFILE),
                         (resource.RLIMIT_FSIZE, FSIZE),
                         (resource.RLIMIT_CORE, 0)):
                resource.setrlimit(r, (v, v))
            if not self.sandboxed and not dirs:
                resource.setrlimit(resource.RLIMIT_AS, (2 * MEMORY,) * 2)
        return enter

    def wrap(self, cmd, work: Path, course: Path, env: dict) -> list[str]:
        return cmd

    def start(self, cmd: list[str], work: Path, course: Path,
              env: dict) -> subprocess.Popen:
        dirs = self._new_cgroup()
        if not self.sandboxed:
            env = dict(env, PYTHONPATH=str(course), HOME=str(work),
                       TMPDIR=str(work / "tmp"))
            (work / "tmp").mkdir(exist_ok=True)
        proc = subprocess.Popen(
            self.wrap(cmd, work, course, env), cwd=work,
            env=env if not self.sandboxed else {"PATH": "/usr/bin:/bin"},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=self._preexec(dirs))
        proc.cgroups = dirs
        return proc

    def stop(self, proc: subprocess.Popen) -> None:
        """Kill everything ``proc`` started; remove its cgroup."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.kill()
        proc.wait()
        for d in getattr(proc, "cgroups", []):
            for _ in range(50):
                pids = (d / "cgroup.procs").read_text().split()
                for p in pids:
                    try:
                        os.kill(int(p), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


class Bubblewrap(Jail):
    name = "bubblewrap"
    sandboxed = True

    def __init__(self, bwrap: str):
        super().__init__()
        self.bwrap = bwrap
        self.venvs = sorted({str(Path(p).resolve()) for p in
                             (sys.prefix, sys.base_prefix)})

    def describe(self) -> str:
        return ("bubblewrap: namespaces pid, net (loopback only), mount "
                "(read-only course copy, private /tmp), ipc, uts; "
                + super().describe().partition("(")[2].rstrip(")"))

    def wrap(self, cmd, work, course, env):
        a = [self.bwrap, "--unshare-all", "--share-net" if False else
             "--unshare-net", "--die-with-parent", "--new-session",
             "--cap-drop", "ALL", "--hostname", "grader",
             "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
             "--ro-bind", "/usr", "/usr"]
        for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
            p = Path(d)
            if p.is_symlink():
                a += ["--symlink", os.readlink(d), d]
            elif p.is_dir():
                a += ["--ro-bind", d, d]
        for f in ("passwd", "group", "hosts", "nsswitch.conf", "ld.so.cache",
                  "ld.so.conf", "ld.so.conf.d", "localtime", "ssl",
                  "alternatives", "fonts", "matplotlibrc"):
            if Path("/etc", f).exists():
                a += ["--ro-bind", f"/etc/{f}", f"/etc/{f}"]
        for p in self.venvs + [str(Path(x).resolve()) for x in
                               env.get("GRADING_RO", "").split(":") if x]:
            a += ["--ro-bind", p, p]
        a += ["--ro-bind", str(course), "/grading/course",
              "--bind", str(work / "_build"), "/grading/course/_build",
              "--bind", str(work), "/grading/work", "--chdir", "/grading/work",
              "--clearenv"]
        env = dict(env, PYTHONPATH="/grading/course", HOME="/grading/work",
                   TMPDIR="/tmp", GRADING_JAILED="1")
        env.pop("GRADING_RO", None)
        for k, v in env.items():
            a += ["--setenv", k, v]
        return a + ["--"] + cmd


def choose(unsafe: bool = False) -> Jail | None:
    """The strongest jail this machine offers; None when only rlimits are
    left and ``unsafe`` was not asked for."""
    bwrap = shutil.which("bwrap")
    if bwrap and subprocess.run(
            [bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/",
             "/", "true"], capture_output=True).returncode == 0:
        return Bubblewrap(bwrap)
    return Jail() if unsafe else None
