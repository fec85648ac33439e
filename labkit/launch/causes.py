"""Why a launch failed, in one line: the first failing rank and its cause.

    cause(run_dir, nproc, oom_before)   # "rank 1 killed (out of memory?):
                                        #  SIGKILL, pid 1366"
    cause(run_dir, nproc)               # "rank 0: RuntimeError: boom"

torchrun's table names the root cause (the first observed failure): its
rank, exit code and pid. A negative exit code is a signal, named
(``SIGSEGV``...); a SIGKILL is what the kernel's OOM killer sends, so it
reads "killed (out of memory?)" when the kernel says so -- the cgroup's
``memory.events`` counted an ``oom_kill`` since the launch began, or the
kernel log names the pid -- and "killed by SIGKILL" otherwise. Else the
rank's last meaningful log line: the exception line if there is one,
never a separator (``====``), a C++ frame or an empty log.
"""
from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

_CPP_FRAME = re.compile(r"^\s*(frame #\d+:|Exception raised from )")
_SEPARATOR = re.compile(r"^[\s=\-*_#~.+|:<>]*$")
_EXCEPTION = re.compile(r"^([\w.]+(Error|Exception|Interrupt|Exit)|"
                        r"[\w.]*Error)\b(:.*)?$")
_NOISE = re.compile(r"^\s*(\[W\d*|W\d{4}|\[rank\d+\]:\[W|warnings\.warn|"
                    r"Traceback \(most recent call last\)|File \")")


def meaningful_lines(path: Path) -> list[str]:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [t.strip() for t in text if t.strip()
            and not _SEPARATOR.match(t) and not _CPP_FRAME.match(t)
            and not _NOISE.match(t)]


def last_meaningful_line(paths) -> str | None:
    """The last exception line of the logs, else their last real line."""
    lines = [ln for p in paths for ln in meaningful_lines(Path(p))]
    if not lines:
        return None
    errors = [ln for ln in lines if _EXCEPTION.match(ln.split(" ", 1)[0]
                                                     .rstrip(":")
                                                     if ln else "")]
    text = errors[-1] if errors else lines[-1]
    return text if len(text) <= 240 else text[:237] + "..."


def root_cause(torchrun_log: Path) -> dict | None:
    """``{"rank", "exitcode", "pid"}`` of torchrun's 'Root Cause'."""
    try:
        text = torchrun_log.read_text(errors="replace")
    except OSError:
        return None
    _, found, after = text.partition("Root Cause")
    if not found:
        return None
    rank = (re.search(r"local_rank:\s*(\d+)", after)
            or re.search(r"rank\s*:\s*(\d+)", after))
    code = re.search(r"exitcode\s*:\s*(-?\d+)", after)
    pid = re.search(r"\(pid:\s*(\d+)\)", after)
    return {"rank": int(rank.group(1)) if rank else None,
            "exitcode": int(code.group(1)) if code else None,
            "pid": int(pid.group(1)) if pid else None}


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def oom_kills() -> int | None:
    """The OOM kills this process's cgroup (v2) has counted so far."""
    try:
        path = Path("/proc/self/cgroup").read_text().strip().split(
            "\n")[-1].split("::", 1)[1]
        events = Path("/sys/fs/cgroup" + path) / "memory.events"
        m = re.search(r"^oom_kill (\d+)", events.read_text(), re.M)
        return int(m.group(1)) if m else None
    except (OSError, IndexError, ValueError):
        return None


def kernel_says_oom(pid: int | None) -> bool:
    """Whether the kernel log names ``pid`` as killed for memory."""
    if pid is None:
        return False
    try:
        out = subprocess.run(["dmesg"], capture_output=True, text=True,
                             timeout=3).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return bool(re.search(rf"(Out of memory|oom-kill|Memory cgroup out of "
                          rf"memory).*\b{pid}\b|Killed process {pid}\b",
                          out))


def cause(run_dir: Path, logs: dict, oom_before: int | None = None,
          bad: list[int] | None = None) -> str | None:
    """One line: the first failing rank and why (see the module)."""
    root = root_cause(run_dir / "torchrun.log") or {}
    rank, code = root.get("rank"), root.get("exitcode")
    if rank is None and bad:
        rank = bad[0]
    if rank is None:
        return None
    if code is not None and code < 0:
        sig = signal_name(-code)
        pid = f", pid {root['pid']}" if root.get("pid") else ""
        if -code == signal.SIGKILL:
            now = oom_kills()
            oom = (oom_before is not None and now is not None
                   and now > oom_before) or kernel_says_oom(root.get("pid"))
            if oom:
                return f"rank {rank} killed (out of memory?): SIGKILL{pid}"
        return f"rank {rank} killed by {sig}{pid}"
    line = last_meaningful_line(logs.get(rank, []))
    if line:
        return f"rank {rank}: {line}"
    return f"rank {rank} exited with status {code}" if code is not None \
        else f"rank {rank} failed without a word in its log"
