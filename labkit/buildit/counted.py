"""The grader's own count of a rerun's collectives replaces the ranks' word.

    result = counted.apply(harness, result)   # in ``labkit.buildit.grade``

A rank imports the student's module, so what its ``CollectiveCounter``
records the student can rewrite. Under grading, a harness that defines
``from_hub`` runs its ranks on the hub's process group
(scripts/grading/proxy.py): every collective a rank makes is performed,
and counted, by the hub in the rerun's own process, where no student code
runs. The hub hands over ``result["hub"]``: per rank the calls
(``[op, bytes, dtype]``) of each counting window the harness opened, in order,
and what the rank sent outside every window. ``apply`` puts the hub's
windows where the harness's checks read the rank's own records
(``from_hub``), so that a rank that forges its record, patches the counter
or ``torch.distributed``, still gets the checks of what it did. A rank
that did anything but barriers outside the harness's windows, or opened
other windows than the harness does (it moved the hub's marks), or talked
to another rank over the network (the hub's group is its only channel)
gets an error, which scores 0.
"""
from __future__ import annotations

# the loopback bytes a hub run may show (none of its traffic uses it)
LOOPBACK_SLACK = 4096


def summed(window: list) -> dict:
    """``{op: bytes}`` of one window's calls (``CollectiveCounter``'s
    ``summary`` without the calls)."""
    out: dict = {}
    for op, nbytes, *_ in window:
        out[op] = out.get(op, 0) + nbytes
    return out


def windows_of(result, windows, n: int) -> list:
    """The ranks' results with each rank's hub windows (``n`` of them)."""
    out = []
    for r, w in zip(result["ranks"], windows):
        if type(w) is not list or len(w) != n:
            raise ValueError(f"{len(w)} counting windows, not {n}")
        out.append((r, w))
    return out


def _calls(hub, w: int) -> list:
    wins, outside = hub.get("windows"), hub.get("outside")
    if not (type(wins) is list and type(outside) is list
            and len(wins) == len(outside) == w):
        raise ValueError("the grader's hub gave no count for every rank")
    return wins, outside


def apply(h, result: dict) -> tuple[dict, str | None]:
    """``(result, error)``: the result with the hub's counts in place of
    the ranks' (or as it was, without a hub); an error that scores 0."""
    hub = result.get("hub")
    if hub is None or not hasattr(h, "from_hub") or result.get("error"):
        return result, None
    ranks = result.get("ranks") or []
    try:
        wins, outside = _calls(hub, len(ranks))
    except ValueError as e:
        return result, str(e)
    if int(result.get("loopback_bytes") or 0) > LOOPBACK_SLACK:
        return result, ("your ranks talked to each other over the network "
                        "(a group or socket of their own): every message "
                        "must go through torch.distributed's default "
                        "group, which the grader counts")
    for r, out in enumerate(outside):
        if out:
            seen = ", ".join(f"{k} {v} B" for k, v in sorted(out.items()))
            return result, (f"rank {r} sent collectives outside the steps "
                            f"the grader counts ({seen}): a part's "
                            "communication belongs in the calls it makes")
    try:
        return h.from_hub(result, wins), None
    except (ValueError, KeyError, TypeError) as e:
        return result, ("the grader's count of your collectives does not "
                        f"fit this part's steps ({e}): each step's "
                        "collectives run inside it")
