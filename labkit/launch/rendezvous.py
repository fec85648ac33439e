"""Where the ranks of one or several nodes meet: torchrun's rendezvous flags.

One node: a free port on 127.0.0.1. Several nodes: torchrun's c10d
rendezvous at node 0's ``host:port`` (node 0's agent hosts the store, the
others join it); a node that is not node 0 first waits for the endpoint
to answer, and fails naming it.
"""
from __future__ import annotations

import random
import re
import socket
import time
from pathlib import Path

from labkit.launch.report import LaunchError


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


# below this, ports belong to well-known services; a one-node rendezvous
# takes a random port between it and the kernel's ephemeral range
_LOWEST = 20000


def ephemeral_range() -> tuple[int, int]:
    """The ports the kernel hands out for outgoing connections."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range") \
            .read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999              # Linux's default


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now.

    Picked at random below the kernel's ephemeral range: a port the kernel
    handed out (bind to port 0) is handed out again, as the source port
    of any process's next outgoing connection, between this call and
    torchrun's bind, and the rendezvous then fails with EADDRINUSE (seen
    in CI: two build-its' gloo connections at once). Another launcher may
    still pick the same port; :func:`port_taken` tells the caller to try
    again with another.
    """
    low = ephemeral_range()[0]
    rng = random.SystemRandom()
    for _ in range(64):
        port = rng.randrange(_LOWEST, low) if low > _LOWEST + 1 else 0
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_taken(rendezvous_line: str | None) -> bool:
    """Whether a failed rendezvous (:func:`rendezvous_failure`'s line)
    failed because its port was taken: a one-node launch tries again."""
    return bool(rendezvous_line) and (
        "EADDRINUSE" in rendezvous_line
        or "address already in use" in rendezvous_line.lower())


def torchrun_flags(endpoint, nnodes: int, node_rank: int,
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


# torchrun's own errors when the nodes never meet (the agent's traceback
# ends in one of these; the C++ frames before it say nothing more)
_RDZV_ERROR = re.compile(
    r"^\S*(Rendezvous\w*Error|DistNetworkError|DistStoreError)\b:?\s*(.*)$")


def rendezvous_failure(torchrun_log: Path, endpoint) -> str | None:
    """One line for a rendezvous that failed, from torchrun's log, or None."""
    try:
        lines = torchrun_log.read_text(errors="replace").splitlines()
    except OSError:
        return None
    found = [m for line in lines
             if (m := _RDZV_ERROR.match(line.strip()))]
    if not found:
        return None
    # the first is the cause ("address already in use"), the last what
    # torchrun made of it
    cause, last = found[0], found[-1]
    where = f"{endpoint[0]}:{endpoint[1]}" if endpoint else "127.0.0.1"
    what = cause.group(2).strip() or cause.group(1)
    head = last.group(1) if last is cause else \
        f"{last.group(1)} ({cause.group(1)})"
    return f"rendezvous at {where} failed: {head}: {what[:240]}"
