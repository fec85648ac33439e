"""A build-it rerun in a jail of its own: the student's source on real ranks.

    python -m grading.rerun            (started by scripts/grade.py)

Reads one JSON line ``{"lab": ..., "source": ...}``, runs the source as
part ``lab`` on the harness's ``HIDDEN`` configuration (the rank side of
``labkit.buildit.run`` on ranks forked from here: ``ranks.py``) and
writes the ranks' plain data as one JSON line. This process is PID 1 of
its jail and not dumpable (set before any rank starts), and each rank
closes the files it inherits, so no rank can write on its pipe; what the
ranks report is still the student's own data: the evaluator, outside,
checks it against references it computes itself.

The counts are this process's own: a part whose harness has ``from_hub``
runs its ranks on the hub's group (``hub.py``, here), which performs and
counts every collective (``hub``: per rank, the calls of each counting
window), and which is their only channel: ``loopback_bytes``, what went
over the jail's loopback during the run (``/proc/net/dev``; the jail has
its own network namespace), must stay near 0 (``labkit.buildit.counted``).
``wire_bytes`` is what a ring would send for the hub's calls (plus the
loopback's; a part without a hub: the loopback's, gloo's own traffic),
which a rank can raise but not lower: a report of collectives that never
ran cannot match it (``labkit.buildit.grade``).
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
from pathlib import Path


def loopback_sent() -> int:
    """Bytes sent on ``lo`` in this network namespace."""
    for ln in open("/proc/net/dev").read().splitlines():
        name, _, data = ln.partition(":")
        if name.strip() == "lo":
            return int(data.split()[8])
    return 0


def own_network() -> bool:
    """This process has a network namespace of its own (a jail's: only
    ``lo``), so that the loopback's bytes are its ranks' alone."""
    names = [ln.partition(":")[0].strip()
             for ln in open("/proc/net/dev").read().splitlines()[2:]]
    return names == ["lo"]


def main() -> None:
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    proto = os.fdopen(os.dup(1), "w")
    log = os.open("rerun.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    try:
        req = json.loads(sys.stdin.readline())
        from labkit import buildit
        from grading.ranks import fork_ranks
        lab, source = str(req["lab"]), str(req["source"])
        h = buildit.harness(lab)
        hub = hasattr(h, "from_hub")
        before = loopback_sent()
        value = fork_ranks(lab, source, h.HIDDEN, buildit.hidden_world(lab),
                           Path("ranks"), buildit.TIMEOUT_S, hub=hub)
        loop = loopback_sent() - before
        # without a jail (--unsafe-no-isolation) the loopback is shared
        value["loopback_bytes"] = loop if own_network() else None
        value["wire_bytes"] = loop + (value["hub"]["wire_bytes"] if hub
                                      else 0)
        out = {"value": value}
    except Exception as e:  # noqa: BLE001 - a reason, not a crash
        out = {"error": f"{type(e).__name__}: {e}"[:200]}
    proto.write(json.dumps(out) + "\n")
    proto.flush()


if __name__ == "__main__":
    main()
