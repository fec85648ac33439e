"""A notebook's ``launch()`` under rehearsal: its ranks on fake tensors.

    LABKIT_REHEARSE=h100x8 LABKIT_REHEARSE_LOG=/tmp/x.jsonl  (the kernel's env)
    ranks = launch("labkit.runs.fit", 8, {...})   # a cell, unchanged

:func:`labkit.launch.launch` hands the call here when ``LABKIT_REHEARSE``
names a node (:mod:`labkit.rehearse.node`); the rehearsal of the
notebooks (:mod:`labkit.rehearse.notebooks`) sets it in the kernel. The
launch runs at its real world size, the cell's own arguments, in this
process: each rank is :func:`labkit.rehearse.world.rehearsed_rank` (the
run module's ``main``; ``dist.init()`` gives every run module the
``meta`` device as its GPU and ``nccl`` as its backend, so the device
rule bites wherever a tensor is left on the CPU). What the cell gets
back is what a real launch returns -- the ranks' records, read back
through JSON -- with every value fake tensors cannot produce as NaN, or
the :class:`LaunchError` a real launch raises:

- a rank whose peak bytes exceed the node's GPU memory raises
  "CUDA out of memory (rehearsed)", so a cell that expects an OOM sees it;
- a rank's error, a device rule or an NCCL rule broken raise with the
  rule's line;
- a launch that cannot run here (another interpreter, more GPUs than the
  node has, an operator fake tensors cannot run: :data:`FAKE_LIMITS`)
  raises :class:`NotRehearsed` with the reason.

Ranks: rank 0 and the last rank are rehearsed (the collectives of the
fake process group need no peer, and SPMD ranks differ by their role,
first or last); when rank 0 sends or receives point to point, every rank
is, since pairing and grouping are checked across all of them
(:func:`labkit.rehearse.nccl.deadlocks`). Training and timing loops are
cut (:data:`CUTS`): a fake step is no time, and a second step holds what
the first made. Each launch appends one JSON line to
``LABKIT_REHEARSE_LOG``: what it ran, its peaks, its problems.
"""
from __future__ import annotations

import json
import math
import os
import time

from labkit.launch.report import LaunchError
from labkit.rehearse.env import DEEPSPEED_ON_CPU, ENV, LOG  # noqa: F401
from labkit.rehearse.limits import (  # noqa: F401 (the hook's API)
    FAKE_LIMITS, LIMIT_WORDS, fake_limit, limit_reason)

# flag -> the most a rehearsal runs (timings: none; training: two steps)
CUTS = {"--steps": 2, "--time-steps": 0, "--timing-steps": 0,
        "--warmup": 0, "--iters": 1, "--repeats": 1, "--sweep-steps": 1}
STEP_FLAGS = {"--kill-step", "--every", "--at"}


# run modules whose lesson is time itself, which fake ranks do not have
TIMED = {"labkit.runs.tools.hang": "a rank stalls on purpose until the process "
         "group's timeout (NCCL's watchdog) ends the others: a wait in "
         "seconds, and the fake group has no timeout (lab 8's cell would "
         "sleep its whole 10 x timeout here)",
         "labkit.runs.hangs": "its faults are waits at the process "
         "group's timeout and py-spy reading live processes: neither "
         "exists in a fake group"}


class NotRehearsed(LaunchError):
    """A launch the rehearsal cannot run, with the reason."""


def active() -> bool:
    return bool(os.environ.get(ENV))


def cut(argv: list[str]) -> tuple[list[str], list[str]]:
    """``argv`` with the loops of :data:`CUTS` shortened; the notes."""
    out, notes = list(argv), []
    # a run whose other flags name its steps (lab 8 kills a rank in step
    # --kill-step, checkpoints --every k) keeps all of them
    keep = {"--steps"} if STEP_FLAGS & set(out) else set()
    for i, a in enumerate(out[:-1]):
        if a in CUTS and a not in keep:
            try:
                n = int(out[i + 1])
            except ValueError:
                continue
            if n > CUTS[a]:
                out[i + 1] = str(CUTS[a])
                notes.append(f"{a} {n} -> {CUTS[a]}")
    return out, notes


def _event(row: dict) -> None:
    path = os.environ.get(LOG)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row, default=str) + "\n")


def _records(records: list) -> list:
    """What a real launch returns: the records read back from JSON."""
    from labkit.dist import _jsonable
    return json.loads(json.dumps(records, default=_jsonable))


def launch(module: str, nproc: int, args=(), *, python=None, nnodes=1,
           run_dir=None, **_) -> list[dict]:
    """:func:`labkit.launch.launch`, rehearsed (see the module doc)."""
    import sys
    from labkit.launch.request import as_argv
    from labkit.rehearse.node import describe
    from labkit.rehearse.run import rehearse_ranks
    node = describe(os.environ[ENV])
    what = f"{module} on {nproc} ranks"
    row = {"module": module, "world_size": nproc, "problems": [],
           "oom": None, "ranks": [], "notes": []}
    reason = None
    # another environment's interpreter (lab 9's .venv-colossalai): its
    # own bin folder, even where both link to one base Python
    if python and os.path.dirname(os.path.abspath(python)) != \
            os.path.dirname(os.path.abspath(sys.executable)):
        reason = (f"runs in another interpreter ({python}); fake ranks run "
                  "in this one")
    elif nnodes != 1:
        reason = "several nodes: rehearsed as one node only"
    elif nproc > node.gpus:
        reason = f"needs >= {nproc} GPUs; the node has {node.gpus}"
    elif module in TIMED:
        reason = TIMED[module]
    if reason:
        row["not_rehearsed"] = reason
        _event(row)
        raise NotRehearsed(f"{what}: not rehearsed: {reason}")
    argv, row["notes"] = cut(as_argv(args))
    t0 = time.perf_counter()
    res = rehearse_ranks(module, nproc, argv, node, where=f"launch {what}",
                         run_dir=run_dir)
    row.update({k: res[k] for k in ("ranks", "problems", "oom")})
    row["seconds"] = round(time.perf_counter() - t0, 1)
    limits = [p for p in res["problems"] if fake_limit(p)]
    limited = bool(limits) and len(limits) == len(res["problems"])
    # DeepSpeed on its CPU accelerator: what follows (a CPU buffer in a
    # collective, a rank stopped elsewhere) is the same stand-in's fault
    ds = [p for p in res["problems"] if DEEPSPEED_ON_CPU in p]
    if ds:
        limits, limited = ds, True
    if limited:   # what fake tensors cannot do: listed, not a failure
        row["not_rehearsed"] = limit_reason(limits[0])
        row["problems"] = []
    _event(row)
    if res["oom"]:
        raise LaunchError(f"{what}: rank {res['oom']['rank']}: "
                          "torch.OutOfMemoryError: CUDA out of memory "
                          f"(rehearsed): peak {res['oom']['peak'] / 1e9:.1f}"
                          f" GB > {node.memory / 1e9:.1f} GB on {node.gpu}")
    if limited:
        raise NotRehearsed(f"{what}: not rehearsed: {row['not_rehearsed']}")
    if res["problems"]:
        raise LaunchError(res["problems"][0])
    records = _records(res["records"])
    for r in records:
        r.setdefault("rehearsed", True)
    return records


def nan_count(x) -> int:
    if isinstance(x, float):
        return int(math.isnan(x))
    if isinstance(x, dict):
        return sum(nan_count(v) for v in x.values())
    if isinstance(x, list):
        return sum(nan_count(v) for v in x)
    return 0
