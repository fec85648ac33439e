"""Which rank hung: heartbeat files, read after the job has failed.

    beat = Heartbeat(run_dir, rank)          # in every rank
    beat("enter", collective=3)              # before a collective
    beat("leave", collective=3)              # after it
    stalled_ranks(run_dir, world_size)       # in the launcher, afterwards

A hang is worse than a crash because nothing fails where the fault is: the
rank that stopped sits in its own code, and every *other* rank waits in a
collective until the process-group timeout fires (by default 10 minutes
for NCCL, 30 for gloo). Their errors name the collective, not the culprit.
Each rank therefore records, in ``heartbeat-<rank>.json``, the last
collective it entered; afterwards the stalled rank is the one whose last
entered collective is behind the others'. :func:`orphans` lists any
process still carrying the run's folder in its environment (there must be
none once the launcher has returned).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path


class Heartbeat:
    def __init__(self, run_dir: str | Path, rank: int):
        self.path = Path(run_dir) / f"heartbeat-{rank}.json"
        self.rank = rank

    def __call__(self, phase: str, collective: int, **extra) -> None:
        rec = {"rank": self.rank, "phase": phase, "collective": collective,
               "time": time.time(), **extra}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec))
        tmp.replace(self.path)


def read_heartbeats(run_dir: str | Path, world_size: int) -> dict:
    out = {}
    for r in range(world_size):
        f = Path(run_dir) / f"heartbeat-{r}.json"
        out[r] = json.loads(f.read_text()) if f.exists() else None
    return out


def stalled_ranks(run_dir: str | Path, world_size: int) -> list[int]:
    """Ranks whose last entered collective is behind the furthest rank's
    (a rank with no heartbeat at all never reached the first one)."""
    beats = read_heartbeats(run_dir, world_size)

    def reached(b):
        if b is None:
            return -1
        return b["collective"] if b["phase"] != "before" else b["collective"] - 1

    far = max(reached(b) for b in beats.values())
    return [r for r, b in beats.items() if reached(b) < far]


def describe_hang(run_dir: str | Path, world_size: int) -> str:
    """One sentence naming the stalled rank(s) and where the others waited."""
    beats = read_heartbeats(run_dir, world_size)
    stalled = stalled_ranks(run_dir, world_size)
    if not stalled:
        return "no rank is behind the others: not a hang of one rank"
    waiting = [b for r, b in beats.items() if r not in stalled and b]
    where = waiting[0] if waiting else {}
    parts = [f"rank {r} never reached collective {where.get('collective')} "
             f"({where.get('op', '?')}); its last heartbeat: "
             f"{(beats[r] or {}).get('phase', 'none')}" for r in stalled]
    waited = [b.get("waited_s") for b in waiting if b.get("waited_s")]
    if waited:
        parts.append(f"the other ranks failed after {max(waited):.1f} s "
                     "(the process-group timeout)")
    return "; ".join(parts)


def orphans(run_dir: str | Path) -> list[int]:
    """PIDs of live processes started for ``run_dir`` (LABKIT_RUN_DIR)."""
    key = f"LABKIT_RUN_DIR={Path(run_dir)}".encode()
    found = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            env = (p / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if key in env and int(p.name) != os.getpid():
            found.append(int(p.name))
    return found
