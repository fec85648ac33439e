"""Start a torchrun job from a notebook cell and collect per-rank JSON.

    from labkit.launch import launch
    results = launch("labkit.runs.selftest", nproc=2, args=["--mode", "ok"])

`launch` runs ``python -m torch.distributed.run --nproc-per-node N -m MODULE
ARGS`` in a new process session, so that a timeout or a failure can kill the
whole group (torchrun and every rank) and leave no orphan behind. Each rank
writes ``rank-<r>.json`` into the run folder with :func:`labkit.dist.save`;
`launch` returns those records as a list indexed by rank.

Why not ``mp.spawn`` from the notebook: the child processes would have to
unpickle functions defined in ``__main__``, which a Jupyter kernel does not
have; torchrun starts clean interpreters on a module instead.

Backend: nccl when the machine has at least ``nproc`` CUDA GPUs, else gloo
(one process per core-ish, ``OMP_NUM_THREADS=1``). ``require_gpu=True``
(the GPU profiles) refuses to fall back to CPU.

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
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TIMEOUT_S = 300.0
LOG_TAIL_LINES = 40


class LaunchError(RuntimeError):
    """A distributed run failed, crashed or timed out; the message holds the logs."""


def cuda_device_count() -> int:
    """Number of visible CUDA GPUs (0 without a CUDA build of torch)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a hard requirement
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def pick_backend(nproc: int, backend: str | None = None,
                 require_gpu: bool = False) -> str:
    """Validate the request and choose nccl or gloo, before anything starts."""
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        raise ValueError(f"world size must be an integer >= 1, got {nproc!r}")
    gpus = cuda_device_count()
    if require_gpu and gpus < nproc:
        raise ValueError(
            f"this profile needs {nproc} CUDA GPUs, {gpus} are visible; "
            "use the cpu profile on a machine without GPUs")
    if backend is None:
        backend = "nccl" if gpus >= nproc else "gloo"
    if backend not in ("nccl", "gloo"):
        raise ValueError(f"unknown backend {backend!r}: use 'nccl' or 'gloo'")
    if backend == "nccl" and gpus < nproc:
        raise ValueError(f"nccl needs one GPU per rank: {nproc} ranks, "
                         f"{gpus} GPUs visible")
    return backend


def checkout_pythonpath(env=None) -> str:
    """PYTHONPATH with this checkout first, so that child processes (ranks,
    notebook kernels) import this labkit whatever else is installed."""
    env = os.environ if env is None else env
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
            if p and p != str(ROOT)]
    return os.pathsep.join([str(ROOT), *rest])


def check_nodes(nnodes: int, node_rank: int,
                rdzv_endpoint: str | None) -> tuple[str, int] | None:
    """Validate a multi-node request; ``(host, port)`` of the rendezvous."""
    for name, v, low in (("nnodes", nnodes, 1), ("node_rank", node_rank, 0)):
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
    if node_rank >= nnodes:
        raise ValueError(f"node_rank {node_rank} is not below nnodes "
                         f"{nnodes} (node ranks are 0..{nnodes - 1})")
    if nnodes == 1 and rdzv_endpoint is None:
        return None
    host, sep, port = str(rdzv_endpoint or "").rpartition(":")
    if not (sep and host and port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"{nnodes} nodes need rdzv_endpoint='host:port' "
                         f"(node 0's address), got {rdzv_endpoint!r}")
    return host, int(port)


def wait_for_endpoint(host: str, port: int, timeout: float) -> None:
    """Wait until ``host:port`` accepts a TCP connection, or fail naming it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=2):
                return
        except OSError as e:
            if time.monotonic() >= deadline:
                raise LaunchError(
                    f"rendezvous endpoint {host}:{port} unreachable for "
                    f"{timeout:.0f} s ({e}); start node 0 first, or check "
                    "the address and the firewall") from None
        time.sleep(0.5)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
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


def _failure_report(run_dir: Path, nproc: int, headline: str) -> str:
    """Say which ranks failed and show the end of each failing rank's log."""
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
    parts = [headline, f"run folder: {run_dir}"]
    for r in bad[:2]:
        for f in logs.get(r, []):
            if not f.stat().st_size:
                continue
            parts.append(f"--- rank {r} {f.name} (last {LOG_TAIL_LINES} lines) ---")
            parts.append(_tail(f))
    parts.append("--- torchrun ---")
    parts.append(_tail(run_dir / "torchrun.log", 15))
    return "\n".join(parts)


def _root_cause_rank(torchrun_log: Path) -> int | None:
    """The (local) rank torchrun names under 'Root Cause (first observed
    failure)'."""
    import re
    try:
        text = torchrun_log.read_text(errors="replace")
    except OSError:
        return None
    _, _, after = text.partition("Root Cause")
    # logs are kept per local rank; on one node local rank = rank
    m = (re.search(r"local_rank:\s*(\d+)", after)
         or re.search(r"rank\s*:\s*(\d+)", after))
    return int(m.group(1)) if m else None


def _kill_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM the whole process group, then SIGKILL what is left.

    The group id is torchrun's pid (a new session): its ranks are killed
    even when torchrun itself is already gone (an agent killed by hand).
    """
    pgid = proc.pid
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)  # anyone left in the group?
            except ProcessLookupError:
                proc.poll()
                return
            time.sleep(0.1)
    proc.poll()


def _kill_orphans(run_dir: Path) -> None:
    """SIGKILL every process still carrying this run's LABKIT_RUN_DIR.

    torchrun starts each rank in a session of its own: if torchrun itself
    is killed (SIGKILL, a node's agent dying), its ranks are not in its
    group and would live on; the environment still names them.
    """
    import psutil
    for p in psutil.process_iter():
        try:
            if p.environ().get("LABKIT_RUN_DIR") == str(run_dir):
                p.kill()
        except (psutil.Error, OSError):
            continue


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
    endpoint = check_nodes(nnodes, node_rank, rdzv_endpoint)
    backend = pick_backend(nproc, backend, require_gpu)
    if timeout is None or timeout <= 0:
        raise ValueError("every launch needs a positive timeout in seconds")
    if not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(f"max_restarts must be an integer >= 0, got "
                         f"{max_restarts!r}")
    python = str(python or sys.executable)
    if not Path(python).exists():
        raise ValueError(f"no Python interpreter at {python}")
    started = time.monotonic()
    if endpoint and node_rank > 0:
        wait_for_endpoint(*endpoint, timeout)
    argv = _as_argv(args)
    run_dir = Path(run_dir) if run_dir else Path(
        tempfile.mkdtemp(prefix=module.rsplit(".", 1)[-1] + "-",
                         dir=_scratch()))
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)

    cmd = [python, "-m", "torch.distributed.run",
           f"--nproc-per-node={nproc}", *_rendezvous(endpoint, nnodes,
                                                     node_rank, timeout),
           f"--max-restarts={max_restarts}",
           f"--log-dir={run_dir / 'logs'}", "--redirects=3", "--tee=0",
           "-m", module, *argv]
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
    child_env.update({k: str(v) for k, v in (env or {}).items()})
    (run_dir / "command.txt").write_text(" ".join(cmd) + "\n")
    what = f"{module} on {nproc} ranks" + (
        f" (node {node_rank} of {nnodes}, rendezvous "
        f"{endpoint[0]}:{endpoint[1]})" if endpoint else "")

    with open(run_dir / "torchrun.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=child_env,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=max(1.0, timeout - (time.monotonic()
                                                       - started)))
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise LaunchError(_failure_report(
                run_dir, nproc, f"{what} timed out after "
                f"{timeout:.0f} s; all its processes were killed")) from None
        except BaseException:  # KeyboardInterrupt in a notebook, for one
            _kill_group(proc)
            raise
        finally:
            _kill_group(proc, grace_s=1.0)  # stragglers, if any
            _kill_orphans(run_dir)
    if rc != 0:
        raise LaunchError(_failure_report(
            run_dir, nproc, f"{what} failed (torchrun exit status {rc})"))
    return _collect(run_dir, nproc, nnodes)


def _rendezvous(endpoint, nnodes: int, node_rank: int,
                timeout: float) -> list[str]:
    """torchrun's flags: one node on a free local port, or c10d at
    ``endpoint`` (node 0's agent hosts the store; the others join it)."""
    if endpoint is None:
        return ["--nnodes=1", "--master-addr=127.0.0.1",
                f"--master-port={free_port()}"]
    host, port = endpoint
    return [f"--nnodes={nnodes}", f"--node-rank={node_rank}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={host}:{port}",
            f"--rdzv-id=labkit-{port}",
            f"--rdzv-conf=is_host={int(node_rank == 0)},"
            f"join_timeout={max(1, int(timeout))}"]


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
        raise LaunchError(_failure_report(
            run_dir, nproc, f"{missing[0]} exited without writing "
            "rank-<r>.json"))
    return [json.loads(files[r].read_text()) for r in sorted(files)]


def _as_argv(args) -> list[str]:
    if isinstance(args, dict):
        argv = []
        for k, v in args.items():
            flag = "--" + k.replace("_", "-")
            if v is True:
                argv.append(flag)
            elif v is False or v is None:
                continue
            elif isinstance(v, (list, tuple)):
                argv += [flag, ",".join(str(x) for x in v)]
            else:
                argv += [flag, str(v)]
        return argv
    return [str(a) for a in args]


def _scratch() -> str:
    d = ROOT / "_build" / "runs"
    d.mkdir(parents=True, exist_ok=True)
    return str(d)


def main(argv=None) -> int:
    """``python -m labkit.launch MODULE --nproc N [...] -- ARGS``."""
    import argparse
    p = argparse.ArgumentParser(prog="python -m labkit.launch",
                                description="launch() from a shell")
    p.add_argument("module")
    p.add_argument("--nproc", type=int, required=True, help="ranks per node")
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--rdzv-endpoint", help="host:port of node 0")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S)
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    a = p.parse_args(argv[:cut])
    try:
        out = launch(a.module, a.nproc, argv[cut + 1:],
                     timeout=a.timeout, nnodes=a.nnodes,
                     node_rank=a.node_rank, rdzv_endpoint=a.rdzv_endpoint)
    except (ValueError, LaunchError) as e:
        print(f"python -m labkit.launch: error: {e}", file=sys.stderr)
        return 2
    print(f"{len(out)} rank records: ranks {[r['rank'] for r in out]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
