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

A point can also be held back (sent later than the harness reached it).
Where the order matters, the harness asks ``scaled``: the hub answers
with a power of two it draws then (no rank can foresee it), recorded
beside the point, and the harness multiplies a gradient by it; the check
finds that factor in the result (``labkit.buildit.sharding``'s overlap),
so the work that follows the point cannot have been done before it.
"""
from __future__ import annotations

import math

# ``fn(name)``: the hub's (grading sets it); None: a point does nothing
SEND = None
# a name's characters the hub keeps
NAME_CHARS = 40


def mark(name: str) -> None:
    """Tell the grader's hub that the run reached ``name`` (a no-op when
    no hub serves this rank)."""
    if SEND is not None:
        SEND(str(name)[:NAME_CHARS])


def scaled(name: str) -> float:
    """A point whose answer is the hub's scale (1.0 without a hub)."""
    if SEND is None:
        return 1.0
    return float(SEND(str(name)[:NAME_CHARS], True))


def of_hub(result) -> list:
    """Per rank, the hub's record of its points: ``[name, windows, calls,
    rss]`` each (``windows``: the counting windows opened before it;
    ``calls``: the open window's calls before it, -1 outside a window;
    ``rss``: the rank's memory then, -1 when unread), and the hub's scale
    after them for a ``scaled`` point. A ValueError when the record is
    not that shape."""
    pts = (result.get("hub") or {}).get("points")
    n = len(result.get("ranks") or [])
    if type(pts) is not list or len(pts) != n:
        raise ValueError("the grader's hub gave no points for every rank")
    for per in pts:
        if type(per) is not list or not all(
                type(p) is list and len(p) in (4, 5) and type(p[0]) is str
                and all(type(v) is int for v in p[1:4])
                and (len(p) == 4 or type(p[4]) is float) for p in per):
            raise ValueError("a point the grader's hub did not record")
    return pts


def scale_found(got, want, first: int, scale: float, sumsq: float,
                world: int) -> bool:
    """Whether a run's gradients ``got`` (``tensors.flat`` data) carry the
    hub's ``scale`` on their first ``first`` tensors (those computed after
    a ``scaled`` point) against the rest, within 1 %: the ratio of their
    least-squares factors to the reference ``want`` (tensors), so that a
    gradient off by one factor everywhere (summed, not averaged) still
    shows it; a point held back past that work does not. And so did the
    all-reduces as the hub computed them (``sumsq``, the sum of squares
    of their results in the step): the reference's, the first tensors
    scaled, averaged (or summed over ``world`` ranks) within 0.1 %, so
    the scale cannot be put in after the collectives."""
    import base64
    import binascii

    import numpy as np
    try:
        g = [np.frombuffer(base64.b64decode(m, validate=True), "<f4")
             .astype(np.float64) for m in got]
    except (binascii.Error, TypeError, ValueError):
        return False
    w = [t.detach().double().flatten().numpy() for t in want]
    if len(g) != len(w) or any(a.shape != b.shape for a, b in zip(g, w)):
        return False

    def factor(a, b) -> float:
        a, b = np.concatenate(a), np.concatenate(b)
        bb = float(b @ b)
        return float(a @ b) / bb if bb else math.nan
    with np.errstate(all="ignore"):
        ratio = factor(g[:first], w[:first]) / factor(g[first:], w[first:])
    norm = scale ** 2 * sum(float(v @ v) for v in w[:first]) + \
        sum(float(v @ v) for v in w[first:])
    seen = any(abs(sumsq - c * c * norm) <= 1e-3 * c * c * norm
               for c in (1, world))
    return bool(abs(ratio / scale - 1) < 0.01) and seen
