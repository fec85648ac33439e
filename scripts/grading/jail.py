"""The box a submission runs in, chosen at run time: the strongest there is.

    jail = choose(unsafe=False)        # None: no sandbox on this machine
    box = jail.box("grade-1-2")        # the submission's limits (limits.py)
    proc = jail.start(cmd, work=..., course=..., env=..., box=box,
                      trusted=False)
    ...
    jail.stop(proc)                    # every process it started is gone

``bubblewrap`` (``bwrap``, Debian package ``bubblewrap``; ``make setup``
installs it when root): new PID, network, mount, IPC and UTS namespaces.
The filesystem is a whitelist: the system's read-only ``/usr``, ``/etc``
basics, the Python and the virtual environments read-only, the course
package copy read-only at ``/grading/course``; the only writable places
are size-limited tmpfs mounts (``/grading/work``, ``/tmp``, the course's
``_build``: ``DISK`` bytes each, and their pages count against the
submission's memory), into which the files of ``work`` are bound
read-only; nothing of the checkout, ``_build/``, the answer keys, other
submissions or the grades. The network namespace has only loopback
(torchrun with gloo still works). When PID 1 of the namespace dies the
kernel kills every process in it.

No process in a jail can trace or read another: a seccomp filter
(``seccomp.py``) refuses ptrace and process_vm_readv/writev in every jail,
and a ``trusted`` jail (the grader's tests, a rerun's supervisor) runs its
command as PID 1 (``--as-pid-1``), which makes itself non-dumpable before
anything else runs: its pipes and memory are then closed to every other
process there (``/proc/1/fd`` needs CAP_SYS_PTRACE, dropped).

Limits: the submission's cgroup (``limits.Box``: memory, processes and CPU
of all its jails together, nested under this process's cgroup), rlimits
always (open files, file size, no core dumps), and the caller's wall
clock. A build-it rerun's jail gets its memory cgroup too (``ENV``, bound
at ``/grading/cgroup`` in a bubblewrap jail), where the hub puts each rank
in a cgroup of its own (``rank_cgroup.py``: what a rank parks outside its
process is counted); with cgroup v2 (its no-internal-process rule) or
none, the hub reads ``/proc`` alone, and ``describe`` says so.
``rlimits`` alone (no namespaces) is not a sandbox: ``grade.py``
refuses it unless ``--unsafe-no-isolation``. Docker/Podman (``otter
grade``) are not used: they need a daemon and images that many
instructors' machines and CI runners do not have.
"""
from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from grading import limits, seccomp
from grading.rank_cgroup import ENV

NOFILE = 4096
FSIZE = 1 << 30           # largest file a submission may write
DISK = 512 << 20          # bytes of each writable tmpfs in a jail


class Jail:
    name = "rlimits"
    sandboxed = False

    def __init__(self):
        self.cgroups = limits.probe()
        # v1's memory controller: a rerun's ranks in cgroups of their own
        self.rank_cgroups = self.cgroups and not (
            limits.CGROUP / "cgroup.controllers").exists()

    def describe(self) -> str:
        lim = (f"cgroup per submission: memory {limits.MEMORY >> 30} GiB, "
               f"pids {limits.PIDS}, {limits.CPUS} CPUs, all its jails "
               "together; " if self.cgroups else "no cgroup (not root?); ")
        lim += ("a memory cgroup per rank of a rerun; " if
                self.rank_cgroups else
                "ranks' memory read from /proc alone (no memory cgroup "
                "per rank: what a rank parks outside its process and its "
                "folder, where its filter leaves a place, is not "
                "counted); ")
        return (f"{self.name} ({lim}rlimits nofile {NOFILE}, "
                f"fsize {FSIZE >> 30} GiB)")

    def box(self, name: str):
        return limits.Box.open(name) if self.cgroups else None

    def _preexec(self, dirs):
        def enter():
            for d in dirs:  # join before exec: no child can escape it
                (d / "cgroup.procs").write_text(str(os.getpid()))
            for r, v in ((resource.RLIMIT_NOFILE, NOFILE),
                         (resource.RLIMIT_FSIZE, FSIZE),
                         (resource.RLIMIT_CORE, 0)):
                resource.setrlimit(r, (v, v))
            if not self.sandboxed and not dirs:
                resource.setrlimit(resource.RLIMIT_AS,
                                   (2 * limits.MEMORY,) * 2)
        return enter

    def wrap(self, cmd, work: Path, course: Path, env: dict,
             trusted: bool, fds: list) -> list[str]:
        return cmd

    def start(self, cmd: list[str], work: Path, course: Path, env: dict,
              box=None, trusted: bool = False,
              what: str = "jail") -> subprocess.Popen:
        dirs = box.cell(what) if box is not None else []
        mem = [d for d in dirs if (d / "memory.stat").exists()]
        if what == "rerun" and self.rank_cgroups and mem:
            env = dict(env, **{ENV: str(mem[0])})   # rank_cgroup.py
        if not self.sandboxed:
            env = dict(env, PYTHONPATH=str(course), HOME=str(work),
                       TMPDIR=str(work / "tmp"))
            (work / "tmp").mkdir(exist_ok=True)
            (work / "_build").mkdir(exist_ok=True)
        fds: list[int] = []
        try:
            proc = subprocess.Popen(
                self.wrap(cmd, work, course, env, trusted, fds), cwd=work,
                env=env if not self.sandboxed else {"PATH": "/usr/bin:/bin"},
                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, start_new_session=True,
                pass_fds=fds, preexec_fn=self._preexec(dirs))
        finally:
            for fd in fds:
                os.close(fd)
        proc.cgroups = dirs
        return proc

    def stop(self, proc: subprocess.Popen) -> None:
        """Kill everything ``proc`` started; remove its cgroups."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.kill()
        proc.wait()
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        limits.Box.empty(getattr(proc, "cgroups", []))


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
                f"(read-only course copy, writable tmpfs only, "
                f"{DISK >> 20} MiB each), ipc, uts; seccomp: no ptrace or "
                "process_vm_*; trusted processes non-dumpable as PID 1; "
                + super().describe().partition("(")[2].rstrip(")"))

    def wrap(self, cmd, work, course, env, trusted, fds):
        a = [self.bwrap, "--unshare-all", "--unshare-net",
             "--die-with-parent", "--new-session", "--cap-drop", "ALL",
             "--hostname", "grader", "--proc", "/proc", "--dev", "/dev",
             "--ro-bind", "/usr", "/usr"]
        if trusted:
            a.append("--as-pid-1")
        prog = seccomp.program_fd()
        if prog is not None:
            fds.append(prog)
            a += ["--seccomp", str(prog)]
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
        size = ["--size", str(DISK)]
        # /tmp first: a checkout or venv under /tmp is bound over it, not
        # hidden by it (bwrap mounts in the order given)
        a += [*size, "--tmpfs", "/tmp"]
        for p in self.venvs + [str(Path(x).resolve()) for x in
                               env.get("GRADING_RO", "").split(":") if x]:
            a += ["--ro-bind", p, p]
        a += ["--ro-bind", str(course), "/grading/course",
              *size, "--tmpfs", "/grading/course/_build",
              *size, "--tmpfs", "/grading/work"]
        if env.get(ENV):          # a rerun's memory cgroup, for its ranks
            a += ["--bind", env[ENV], "/grading/cgroup"]
            env = dict(env, **{ENV: "/grading/cgroup"})
        for f in sorted(work.iterdir()):
            if f.is_file() and not f.is_symlink():
                a += ["--ro-bind", str(f), f"/grading/work/{f.name}"]
        # bwrap's own root is a tmpfs: read-only, or it is unbounded space
        a += ["--remount-ro", "/", "--chdir", "/grading/work", "--clearenv"]
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
