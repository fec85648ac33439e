"""What a failed launch says: which rank failed first, and its log's end.

torchrun keeps each rank's stdout/stderr under ``<run_dir>/logs``; the
report names the failing ranks (the root cause first) and shows the last
lines of their logs, then the end of torchrun's own log without the C++
stack frames, which tell a reader nothing.
"""
from __future__ import annotations

import re
from pathlib import Path

LOG_TAIL_LINES = 40
# "frame #3: c10d::TCPStore::... + 0x1f (0x7f... in /.../libtorch.so)" and
# "Exception raised from ... (most recent call first):"
_CPP_FRAME = re.compile(r"^\s*(frame #\d+:|Exception raised from )")


class LaunchError(RuntimeError):
    """A distributed run failed, crashed or timed out; the message holds the logs."""


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    text = [t for t in text if not _CPP_FRAME.match(t)]
    return "\n".join(text[-lines:]) if text else "(empty log)"


def rank_logs(run_dir: Path) -> dict[int, list[Path]]:
    """torchrun's per-rank stdout/stderr files under ``run_dir/logs``."""
    logs: dict[int, list[Path]] = {}
    for f in sorted((run_dir / "logs").glob("**/attempt_*/*/std*.log")):
        try:
            rank = int(f.parent.name)
        except ValueError:
            continue
        logs.setdefault(rank, []).append(f)
    return logs


def failure_report(run_dir: Path, nproc: int, headline: str,
                   oom_before: int | None = None,
                   explain: bool = True) -> str:
    """Say which ranks failed and show the end of each failing rank's log."""
    from labkit.launch.causes import cause
    errors = {}
    for f in (run_dir / "logs").glob("**/attempt_*/*/error.json"):
        try:
            errors[int(f.parent.name)] = f
        except ValueError:
            pass
    logs = rank_logs(run_dir)
    done = {r for r in range(nproc) if (run_dir / f"rank-{r}.json").exists()}
    bad = sorted(errors) or sorted(set(range(nproc)) - done) or list(range(nproc))
    root = _root_cause_rank(run_dir / "torchrun.log")
    if root is not None:  # the rank that failed first, then the rest
        bad = [root] + [r for r in bad if r != root]
    why = cause(run_dir, logs, oom_before, bad) if explain else None
    parts = [headline + (f": {why}" if why else ""),
             f"run folder: {run_dir}"]
    for r in bad[:2]:
        files = [f for f in logs.get(r, []) if f.stat().st_size]
        if logs.get(r) and not files:  # it started and printed nothing
            parts.append(f"--- rank {r}: its logs are empty (it printed "
                         "nothing before it ended) ---")
        for f in files:
            parts.append(f"--- rank {r} {f.name} (last {LOG_TAIL_LINES} lines) ---")
            parts.append(_tail(f))
    parts.append("--- torchrun ---")
    parts.append(_tail(run_dir / "torchrun.log", 15))
    return "\n".join(parts)


def _root_cause_rank(torchrun_log: Path) -> int | None:
    """The (local) rank torchrun names under 'Root Cause (first observed
    failure)'."""
    try:
        text = torchrun_log.read_text(errors="replace")
    except OSError:
        return None
    _, _, after = text.partition("Root Cause")
    # logs are kept per local rank; on one node local rank = rank
    m = (re.search(r"local_rank:\s*(\d+)", after)
         or re.search(r"rank\s*:\s*(\d+)", after))
    return int(m.group(1)) if m else None
