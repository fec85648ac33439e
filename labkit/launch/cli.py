"""``launch`` from a shell, on each node of a multi-node run.

    python -m labkit.launch labkit.runs.sharding --nproc 8 --nnodes 2 \\
        --node-rank 0 --rdzv-endpoint node0:29500 --timeout 1800 \\
        -- --strategies fsdp2_hybrid --shard-group 8

Exit status 2 and one line on stderr for a bad request, an unreachable
endpoint or a rendezvous that failed; a crashed rank shows its log.
"""
from __future__ import annotations

import argparse
import sys

from labkit.launch import DEFAULT_TIMEOUT_S, LaunchError, launch


def main(argv=None) -> int:
    """``python -m labkit.launch MODULE --nproc N [...] -- ARGS``."""
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
