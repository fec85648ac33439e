"""Start a torchrun job from a notebook cell and collect per-rank JSON.

    from labkit.launch import launch
    results = launch("labkit.runs.tools.selftest", nproc=2, args=["--mode", "ok"])

`launch` runs ``python -m torch.distributed.run --nproc-per-node N -m MODULE
ARGS`` under a guard process (:mod:`labkit.launch.guard`) that ends
torchrun and every rank at the timeout, on a failure, and whenever the
caller dies (SIGKILL and a Jupyter kernel restart included): no process
outlives its launcher. ``run_dir`` must be new, empty, or a folder an
earlier launch made; anything else is refused, never deleted. Each rank
writes ``rank-<r>.json`` into the run folder with :func:`labkit.dist.save`;
`launch` returns those records as a list indexed by rank.

Why not ``mp.spawn`` from the notebook: the child processes would have to
unpickle functions defined in ``__main__``, which a Jupyter kernel does not
have; torchrun starts clean interpreters on a module instead.

Backend: nccl when the machine has at least ``nproc`` CUDA GPUs, else gloo
(one process per core-ish, ``OMP_NUM_THREADS=1``). ``require_gpu=True``
(the GPU profiles) refuses to fall back to CPU. Gloo ranks see no GPU
(``CUDA_VISIBLE_DEVICES=""``, unless ``env`` sets it): on a GPU machine
FSDP2's default mesh and DeepSpeed's accelerator would otherwise call
``set_device(LOCAL_RANK)``, which fails for ranks 1-3 of lab 14's four
gloo ranks on one GPU; DeepSpeed takes its CPU accelerator there.

Several nodes: call ``launch`` on every node with the same ``nnodes`` and
``rdzv_endpoint`` (``host:port`` of node 0) and that node's ``node_rank``::

    launch(mod, 8, args, nnodes=2, node_rank=0, rdzv_endpoint="node0:29500")
    launch(mod, 8, args, nnodes=2, node_rank=1, rdzv_endpoint="node0:29500")

torchrun's c10d rendezvous meets there (node 0's agent hosts the store);
each node returns the records of its own ranks. A node that is not node 0
first waits for the endpoint to answer and fails, naming it, if it does
not within the timeout. The same from a shell, on each node (exit status
2 and one line for a bad request or an unreachable endpoint)::

    python -m labkit.launch labkit.runs.sharding --nproc 8 --nnodes 2 \
        --node-rank 0 --rdzv-endpoint node0:29500 --timeout 1800 \
        -- --strategies fsdp2_hybrid --shard-group 8

The parts: :mod:`~labkit.launch.request` (checks and backend, before
anything starts), :mod:`~labkit.launch.rendezvous` (one node or several),
:mod:`~labkit.launch.reaper` and :mod:`~labkit.launch.guard` (start and
end the process tree), :mod:`~labkit.launch.report` (what a failure
says), :mod:`~labkit.launch.cli` (the command line).

The package: the guard, rendezvous, reaper and report are its submodules,
which never import this ``__init__``. It imports only ``labkit.launch.*``,
``labkit.rehearse.node`` and the standard library; the rehearsal, above
it, is loaded by name (:data:`REHEARSAL`).
"""
from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from labkit.launch import heartbeat
from labkit.launch.causes import oom_kills, signal_name
from labkit.launch.reaper import _kill_group, _kill_orphans, start, stop
from labkit.launch.rendezvous import (check_nodes, free_port, port_taken,
                                      rendezvous_failure, torchrun_flags,
                                      wait_for_endpoint)
from labkit.launch.report import (LOG_TAIL_LINES, LaunchError,
                                  failure_report, rank_logs)
from labkit.launch.request import (DEFAULT_TIMEOUT_S, ROOT, as_argv,
                                   check_run_dir, checkout_pythonpath,
                                   cuda_device_count, fresh_run_dir,
                                   pick_backend)

__all__ = ["launch", "LaunchError", "pick_backend", "cuda_device_count",
           "checkout_pythonpath", "venv_path", "check_nodes",
           "wait_for_endpoint",
           "free_port", "rank_logs", "ROOT", "DEFAULT_TIMEOUT_S",
           "LOG_TAIL_LINES", "_kill_group", "_kill_orphans"]


def launch(module: str, nproc: int, args: list | tuple | dict = (), *,
           timeout: float = DEFAULT_TIMEOUT_S, backend: str | None = None,
           require_gpu: bool = False, run_dir: str | Path | None = None,
           env: dict | None = None, nnodes: int = 1, node_rank: int = 0,
           rdzv_endpoint: str | None = None, max_restarts: int = 0,
           python: str | Path | None = None) -> list[dict]:
    """Run ``torchrun -m module`` on ``nproc`` ranks; return rank JSON records.

    ``nproc`` ranks per node; with ``nnodes`` > 1 the records are those of
    this node's ranks, in rank order (see the module docstring).

    ``args`` is a list of strings, or a dict turned into ``--key value``
    flags (``True`` gives a bare flag, lists are joined with commas).
    ``max_restarts``: torchrun's ``--max-restarts``, how many times the
    whole group is started again after a rank fails (chapter 8).
    Raises ``ValueError`` for bad requests (before any process starts) and
    :class:`LaunchError` on a crash, a non-zero exit or a timeout, with the
    failing rank's log tail in the message. ``python``: the interpreter
    that runs torchrun and the ranks (default: this one), e.g. another
    environment's ``.venv-colossalai/bin/python``.
    """
    started = time.monotonic()    # the timeout counts from the call
    endpoint = check_nodes(nnodes, node_rank, rdzv_endpoint)
    if os.environ.get("LABKIT_REHEARSE"):   # fake ranks: labkit.rehearse
        rehearsed = importlib.import_module(REHEARSAL).launch
        return rehearsed(module, nproc, args, python=python, nnodes=nnodes)
    backend = pick_backend(nproc, backend, require_gpu)
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) \
            or not math.isfinite(timeout) or timeout <= 0:
        raise ValueError(f"every launch needs a finite positive timeout in "
                         f"seconds, got {timeout!r}")
    if not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(f"max_restarts must be an integer >= 0, got "
                         f"{max_restarts!r}")
    python = str(python or sys.executable)
    if not Path(python).exists():
        raise ValueError(f"no Python interpreter at {python}")
    if run_dir:
        run_dir = Path(os.path.abspath(run_dir))
        check_run_dir(run_dir)
    if endpoint and node_rank > 0:
        wait_for_endpoint(*endpoint, timeout)
    argv = as_argv(args)
    run_dir = run_dir or Path(
        tempfile.mkdtemp(prefix=module.rsplit(".", 1)[-1] + "-",
                         dir=_scratch()))
    what = f"{module} on {nproc} ranks" + (
        f" (node {node_rank} of {nnodes}, rendezvous "
        f"{endpoint[0]}:{endpoint[1]})" if endpoint else "")
    for attempt in range(_PORT_TRIES):
        fresh_run_dir(run_dir)
        rc, guard_pid, oom_before = _run_torchrun(
            python, module, argv, nproc, nnodes, node_rank, endpoint,
            max_restarts, backend, run_dir, env, what, started, timeout)
        rdzv = rendezvous_failure(run_dir / "torchrun.log", endpoint) \
            if rc > 0 else None
        # one node, nothing ran, its port taken between our pick and
        # torchrun's bind: again on another port (the timeout still counts)
        if not (endpoint is None and port_taken(rdzv)
                and not _ranks_ran(run_dir)
                and attempt + 1 < _PORT_TRIES
                and time.monotonic() - started < timeout - 5):
            break
    if rc < 0:   # the guard itself was killed: torchrun died with it
        raise LaunchError(failure_report(
            run_dir, nproc, f"{what} failed: its guard (pid {guard_pid}) was "
            f"killed by {signal_name(-rc)}; torchrun and every rank were "
            "ended with it", oom_before))
    if rc != 0:
        if rdzv and not _ranks_ran(run_dir):  # one line: nothing else to see
            raise LaunchError(f"{what}: {rdzv}; run folder {run_dir}")
        # the ranks ran (a node died mid-run, say): their logs say why
        raise LaunchError(failure_report(
            run_dir, nproc, f"{what} failed (torchrun exit status {rc})"
            + (f"; {rdzv}" if rdzv else ""), oom_before))
    return _collect(run_dir, nproc, nnodes)


def venv_path(python: str, path: str) -> str:
    """``PATH`` with the interpreter's own ``bin`` first: the tools its
    environment installed (ninja for torch's cpp_extension and DeepSpeed's
    JIT ops, triton's helpers) are found by the ranks as by an activated
    venv, though ``.venv/bin/python script.py`` activates nothing. Not
    resolved: ``.venv/bin/python`` links to the system's interpreter."""
    here = os.path.dirname(os.path.abspath(python))
    rest = [d for d in path.split(os.pathsep) if d and d != here]
    return os.pathsep.join([here, *rest])


# The rehearsal (fake ranks, labkit.rehearse) sits above the launcher and
# imports it: under LABKIT_REHEARSE the launcher loads it by name, as
# torchrun loads a rank's module, so no import runs back up.
REHEARSAL = "labkit.rehearse.hook"

# a one-node rendezvous whose port someone else took is tried this often
_PORT_TRIES = 3


def _run_torchrun(python, module, argv, nproc, nnodes, node_rank, endpoint,
                  max_restarts, backend, run_dir, env, what, started,
                  timeout) -> tuple[int, int, object]:
    """Start torchrun under its guard and wait: ``(exit status, the
    guard's pid, the OOM kills before)``; raises :class:`LaunchError` on
    the timeout or a rank that stopped beating."""
    cmd = [python, "-m", "torch.distributed.run",
           f"--nproc-per-node={nproc}", *torchrun_flags(endpoint, nnodes,
                                                        node_rank, timeout),
           f"--max-restarts={max_restarts}",
           f"--log-dir={run_dir / 'logs'}", "--redirects=3", "--tee=0",
           "-m", "labkit.launch.rank", module, *argv]
    child_env = dict(os.environ)
    child_env.update({
        "LABKIT_BACKEND": backend,
        "LABKIT_RUN_DIR": str(run_dir),
        "OMP_NUM_THREADS": child_env.get("OMP_NUM_THREADS", "1"),
        "TORCH_EXTENSIONS_DIR": child_env.get(
            "TORCH_EXTENSIONS_DIR", str(ROOT / ".cache" / "torch_extensions")),
        "PYTHONUNBUFFERED": "1",
    })
    child_env["PYTHONPATH"] = checkout_pythonpath(child_env)
    child_env["PATH"] = venv_path(python, child_env.get("PATH", ""))
    if backend == "gloo":     # CPU ranks: no GPU to claim (module doc)
        child_env["CUDA_VISIBLE_DEVICES"] = ""
    child_env.update({k: str(v) for k, v in (env or {}).items()})
    (run_dir / "command.txt").write_text(" ".join(cmd) + "\n")

    oom_before = oom_kills()
    with open(run_dir / "torchrun.log", "wb") as log:
        proc = start(cmd, log, child_env)
        try:
            rc = _wait(proc, run_dir, max(1.0, timeout - (time.monotonic()
                                                          - started)))
        except subprocess.TimeoutExpired:
            stop(proc)
            raise LaunchError(_timed_out(run_dir, nproc, endpoint, what,
                                         timeout)) from None
        except _Stuck as s:
            stop(proc)
            rank, age, state, pid = s.args
            raise LaunchError(failure_report(
                run_dir, nproc, f"{what}: rank {rank} stuck: no heartbeat "
                f"for {age:.0f} s, {state} (pid {pid}); all its processes "
                "were killed", explain=False)) from None
        except BaseException:  # KeyboardInterrupt in a notebook, for one
            stop(proc)
            raise
        finally:
            stop(proc)  # stragglers, if any
            _kill_orphans(run_dir)
    return rc, proc.pid, oom_before


class _Stuck(Exception):
    """A rank stopped beating (labkit.launch.heartbeat)."""


def _wait(proc, run_dir: Path, timeout: float) -> int:
    """``proc.wait(timeout)``, watching the ranks' heartbeats each second
    (``_Stuck`` for a rank that stopped beating)."""
    deadline = time.monotonic() + timeout
    limit = heartbeat.stall_s()
    while True:
        left = deadline - time.monotonic()
        try:
            return proc.wait(timeout=max(0.01, min(1.0, left)))
        except subprocess.TimeoutExpired:
            if left <= 1.0:
                raise
        found = heartbeat.stuck(run_dir, limit) if limit < timeout else None
        if found:
            raise _Stuck(*found)


def _timed_out(run_dir: Path, nproc: int, endpoint, what: str,
               timeout: float) -> str:
    head = (f"{what} timed out after {timeout:.0f} s; all its processes "
            "were killed")
    rdzv = rendezvous_failure(run_dir / "torchrun.log", endpoint)
    if not _ranks_ran(run_dir) and (rdzv or endpoint):  # never met
        return (f"{head}: {rdzv or 'the nodes never met at the rendezvous'}"
                f"; run folder {run_dir}")
    return failure_report(run_dir, nproc, head)


def _ranks_ran(run_dir: Path) -> bool:
    """Whether torchrun started any rank of this node (it makes a rank's
    log files as it starts it, after the rendezvous): a rank that printed
    nothing still ran, and its (empty) log is part of the report."""
    return bool(rank_logs(run_dir))


def _collect(run_dir: Path, nproc: int, nnodes: int) -> list[dict]:
    """This node's rank records in rank order: ranks 0..nproc-1 on one
    node, else the ``nproc`` ranks torchrun's rendezvous placed here."""
    files = {int(f.stem.split("-")[1]): f for f in run_dir.glob("rank-*.json")}
    if nnodes == 1:
        missing = [f"rank {r}" for r in range(nproc) if r not in files]
    else:
        missing = [f"{nproc - len(files)} of this node's ranks"] * (
            len(files) < nproc)
    if missing:
        raise LaunchError(failure_report(
            run_dir, nproc, f"{missing[0]} exited without writing "
            "rank-<r>.json"))
    return [json.loads(files[r].read_text()) for r in sorted(files)]


def _scratch() -> str:
    d = ROOT / "_build" / "runs"
    d.mkdir(parents=True, exist_ok=True)
    return str(d)
