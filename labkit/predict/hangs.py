"""What each tool must say about a planted fault (no torch).

    from labkit.predict import hangs as H
    H.NAMES["slow"]            # ("flight_recorder", "py_spy")
    H.fr_seq(at=2)             # 6: the flight recorder's sequence number
    H.detail_seq(at=2)         # 5: the fingerprint's SequenceNumber

``labkit.runs.hangs`` issues one barrier, then per step an all-reduce and
a broadcast (``OPS_PER_STEP``). The flight recorder numbers a group's
collectives from 1 (``collective_seq_id``), so step ``at``'s all-reduce,
where every planted fault strikes, is number ``1 + 2 at + 1``; the
``TORCH_DISTRIBUTED_DEBUG=DETAIL`` fingerprint counts the collectives
before it, from 0 (``SequenceNumber``): ``1 + 2 at``.

Which tool can name which culprit (``NAMES``) follows from what each one
sees. The fingerprint check compares ops and shapes before a collective
runs: it names a skipped, reordered or misshapen collective, and has
nothing to compare when a rank is dead or late. The flight recorder
keeps what each rank *entered*: the rank that is behind is missing from
the first collective the others entered, and a dead rank leaves no dump
at all. py-spy shows where each live rank's Python stands: the odd one
out is in another collective, in its data loader, or not there. A shape
mismatch on gloo is not a hang: the rank that *receives* the larger
message aborts ("Received data size doesn't match expected size"), so
the recorder and py-spy point at that victim, not at the culprit; only
the fingerprint check names the culprit.
"""
from __future__ import annotations

OPS_PER_STEP = 2     # all-reduce the gradients, broadcast the parameters
WARMUP = 1           # the barrier before the first step
TOOLS = ("detail", "flight_recorder", "py_spy")
NAMES = {
    "skip": ("detail", "flight_recorder", "py_spy"),
    "shape": ("detail",),
    "order": ("detail", "flight_recorder", "py_spy"),
    "dead": ("flight_recorder", "py_spy"),
    "slow": ("flight_recorder", "py_spy"),
}
# the runs each tool needs: the fingerprint check changes the run (a
# mismatch raises at once instead of hanging), so it gets its own
DETAIL_FAULTS = tuple(f for f, t in NAMES.items() if "detail" in t)
HANG_FAULTS = tuple(f for f, t in NAMES.items()
                    if set(t) & {"flight_recorder", "py_spy"})


def fr_seq(at: int) -> int:
    """The flight recorder's ``collective_seq_id`` of step ``at``'s
    all-reduce (numbered from 1, the barrier first)."""
    return WARMUP + OPS_PER_STEP * at + 1


def detail_seq(at: int) -> int:
    """The DETAIL fingerprint's ``SequenceNumber`` of the same collective
    (the count of collectives before it)."""
    return WARMUP + OPS_PER_STEP * at


def majority_possible(world_size: int) -> bool:
    """Every tool compares ranks; with two, each accuses the other."""
    return world_size >= 3


def planted_log(fault: str, world_size: int, culprit: int, at: int,
                numel: int = 1024) -> dict[int, list[dict]]:
    """Each rank's collective log as the run leaves it when ``fault`` is
    planted: ``{rank: [{"seq", "op", "shape"}, ...]}``, up to the first
    collective of step ``at`` (where every rank stops); a dead rank has
    no log. The build-it of assignment 17 reads logs of this form."""
    logs = {}
    for r in range(world_size):
        planted = fault if r == culprit else "none"
        if planted == "dead":
            continue
        ops = [("barrier", [])]
        for _ in range(at):
            ops += [("all_reduce", [numel]), ("broadcast", [numel])]
        first = {"none": ("all_reduce", [numel]),
                 "skip": ("broadcast", [numel]),
                 "order": ("broadcast", [numel]),
                 "shape": ("all_reduce", [numel + 1]),
                 "slow": None}[planted]
        if first:
            ops.append(first)
        logs[r] = [{"seq": i + 1, "op": op, "shape": shape}
                   for i, (op, shape) in enumerate(ops)]
    return logs
