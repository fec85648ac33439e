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
with a weight per row of the batch, powers of two it draws then (no rank
can foresee them), recorded beside the point, and the harness multiplies
each row of a gradient by its weight before the matmul that follows the
point; the check finds those weights in the result
(``labkit.buildit.sharding``'s overlap). One number would not do: a
gradient finished before the point takes it afterwards by a product
(tests/buildit/hostile_sharding_adaptive.py); a weight per row enters
the matmul's sum over the rows, so the gradient that carries them was
computed after the point, a matmul's work the hub's order then puts
after everything the rank sent before it.
"""
from __future__ import annotations

import math

# ``fn(name)``: the hub's (grading sets it); None: a point does nothing
SEND = None
# a name's characters the hub keeps
NAME_CHARS = 40
# a scaled point's weight of a row, drawn by the hub: a power of two,
# never 1 (so that every row of a gradient computed before it is off)
WEIGHTS = (0.25, 0.5, 2.0, 4.0)


def drawn(weights) -> bool:
    """Whether ``weights`` are a scaled point's as the hub draws them."""
    return type(weights) is list and bool(weights) and \
        all(v in WEIGHTS for v in weights)


def mark(name: str) -> None:
    """Tell the grader's hub that the run reached ``name`` (a no-op when
    no hub serves this rank)."""
    if SEND is not None:
        SEND(str(name)[:NAME_CHARS])


def scaled(name: str, rows: int) -> list:
    """A point whose answer is the hub's weights, one per row of a batch
    of ``rows`` (1.0 each without a hub)."""
    if SEND is None:
        return [1.0] * rows
    got = SEND(str(name)[:NAME_CHARS], int(rows))
    if type(got) is not list or len(got) != rows:
        raise RuntimeError("the grader's hub gave no weights for a point")
    return [float(v) for v in got]


def of_hub(result) -> list:
    """Per rank, the hub's record of its points: ``[name, windows, calls,
    rss]`` each (``windows``: the counting windows opened before it;
    ``calls``: the open window's calls before it, -1 outside a window;
    ``rss``: the rank's memory then, -1 when unread), and the hub's
    weights after them for a ``scaled`` point. A ValueError when the
    record is not that shape."""
    pts = (result.get("hub") or {}).get("points")
    n = len(result.get("ranks") or [])
    if type(pts) is not list or len(pts) != n:
        raise ValueError("the grader's hub gave no points for every rank")
    for per in pts:
        if type(per) is not list or not all(
                type(p) is list and len(p) in (4, 5) and type(p[0]) is str
                and all(type(v) is int for v in p[1:4])
                and (len(p) == 4 or type(p[4]) is list and p[4] and
                     all(type(v) is float for v in p[4])) for p in per):
            raise ValueError("a point the grader's hub did not record")
    return pts


def weights_found(got, weighted, plain, first: int, sumsq: float,
                  world: int) -> bool:
    """Whether a run's gradients ``got`` (``tensors.flat`` data) carry the
    hub's weights on their first ``first`` tensors (those computed after
    a ``scaled`` point): ``weighted``, the reference's with those rows
    weighted, fits them to within 1 % of their norm, by the factor that
    fits the rest to ``plain`` (the reference's), so that a gradient off
    by one factor everywhere (summed, not averaged) still shows it; a
    point held back past that work does not, nor one number put in
    afterwards. And so did the all-reduces as the hub computed them
    (``sumsq``, the sum of squares of their results in the step): the
    reference's, the first tensors weighted, averaged (or summed over
    ``world`` ranks) within 0.1 %, so the weights cannot be put in after
    the collectives."""
    import base64
    import binascii

    import numpy as np
    try:
        g = [np.frombuffer(base64.b64decode(m, validate=True), "<f4")
             .astype(np.float64) for m in got]
    except (binascii.Error, TypeError, ValueError):
        return False
    w = [t.detach().double().flatten().numpy()
         for t in list(weighted[:first]) + list(plain[first:])]
    if len(g) != len(w) or any(a.shape != b.shape for a, b in zip(g, w)):
        return False
    a, b = np.concatenate(g[first:]), np.concatenate(w[first:])
    head, want = np.concatenate(g[:first]), np.concatenate(w[:first])
    with np.errstate(all="ignore"):
        c = float(a @ b) / float(b @ b) if float(b @ b) else math.nan
        off = float(np.linalg.norm(head - c * want) /
                    np.linalg.norm(c * want))
    norm = sum(float(v @ v) for v in w)
    seen = any(abs(sumsq - k * k * norm) <= 1e-3 * k * k * norm
               for k in (1, world))
    return bool(off < 0.01) and seen
