"""Points a harness marks inside its run, recorded by the grader's hub.

    points.mark("backward 0")      # in a harness, on a rank

On ranks that count themselves (a notebook's run) a point does nothing.
Under grading the rank's group is the hub's (scripts/grading/proxy.py)
and ``SEND`` is set before any student code is imported
(scripts/grading/ranks.py): the rank then waits while the hub, in another
process, records where the point fell (the counting windows opened so
far, the calls of the open one before it) and reads the rank's memory
(scripts/grading/memory.py). What a harness would otherwise measure in
the rank's own process (which imports the student's code: a timeline of
its dispatches, a probe of its storages) is read there instead
(``labkit.buildit.sharding``'s overlap, ``labkit.buildit.fsdp``'s peak).

A rank that drops a point or adds one changes the count the harness
expects, which fails the check that reads them; it cannot lower the
memory the kernel counts when a point is read other than by freeing it.
"""
from __future__ import annotations

# ``fn(name)``: the hub's (grading sets it); None: a point does nothing
SEND = None
# a name's characters the hub keeps
NAME_CHARS = 40


def mark(name: str) -> None:
    """Tell the grader's hub that the run reached ``name`` (a no-op when
    no hub serves this rank)."""
    if SEND is not None:
        SEND(str(name)[:NAME_CHARS])


def of_hub(result) -> list:
    """Per rank, the hub's record of its points: ``[name, windows, calls,
    rss]`` each (``windows``: the counting windows opened before it;
    ``calls``: the open window's calls before it, -1 outside a window;
    ``rss``: the rank's memory then, -1 when unread). A ValueError when
    the record is not that shape."""
    pts = (result.get("hub") or {}).get("points")
    n = len(result.get("ranks") or [])
    if type(pts) is not list or len(pts) != n:
        raise ValueError("the grader's hub gave no points for every rank")
    for per in pts:
        if type(per) is not list or not all(
                type(p) is list and len(p) == 4 and type(p[0]) is str
                and all(type(v) is int for v in p[1:]) for p in per):
            raise ValueError("a point the grader's hub did not record")
    return pts
