"""What a rank holds as the grader's memory probe begins: nothing to stage.

    held.check(result, readings, course)   # a reason, or None

A memory check under grading (``zero_state``'s "state" and "freed",
``fsdp_peak``'s "peak") reads differences of the hub's counts of a
rank's memory (scripts/grading/memory.py) from the probe's first
reading. A rank can stage such a difference: allocate a block before
that reading and free it before a later one, and what it keeps looks
that much smaller (tests/buildit/hostile_zero_ballast.py: full Adam
with an 8.4 MB block freed as its optimizer is built).

So the hub reads each rank's memory once more, before any student code
runs (``base``: scripts/grading/ranks.py, after the modules a first
optimizer imports lazily were imported before the fork). At the probe's
first reading a rank holds, beyond that, what the course's code built
for the probe (its model and data: ``course`` bytes, from the sizes)
and what the checked steps leave (the count's noise, ``NOISE``: lab 4's
and lab 3's answer keys leave 1.5 MiB once their checked run is
released, ``release``; a block that hides a gradient or Adam's moments
on the probe is 4 MB or more).
Anything more is the student's code's, a block it could free between
the grader's readings: ``check`` fails it with the grader's reason.
"""
from __future__ import annotations

# what a rank's count holds beyond the probe's own at its first reading
NOISE = 3 << 20


def release() -> None:
    """Before the probe's first reading (the course's code): collect the
    checked run's cycles (a hook holds its owner) and give the heap's
    free pages back to the kernel (glibc's ``malloc_trim``), so that
    the count holds what is alive."""
    import ctypes
    import gc
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass                      # not glibc: the noise is larger


def held(result, r: int, reading) -> int | None:
    """Bytes rank ``r``'s memory count ``reading`` exceeds the hub's
    reading before the student's code was imported (None: unread)."""
    base = (result.get("hub") or {}).get("base")
    b = base[r] if type(base) is list and r < len(base) else -1
    if type(b) is not int or b < 0 or type(reading) is not int \
            or reading < 0:
        return None
    return reading - b


def check(result, readings: list, course: int) -> str | None:
    """None when every rank's reading at the probe's first point holds at
    most ``course`` bytes (the probe's model and data) and the noise
    more than before the student's code ran; else the reason."""
    got = [held(result, r, v) for r, v in enumerate(readings)]
    if not got or any(g is None for g in got):
        return ("the grader has no count of your ranks' memory from "
                "before your code was imported")
    worst = max(got) - course
    if worst <= NOISE:
        return None
    return (f"as the grader's memory probe began, a rank held {worst} B "
            f"more than before your code was imported, beyond the "
            f"probe's own model and data ({course} B; the grader "
            f"counted): memory your code allocated earlier (at import, or "
            f"in the checked steps) that it could free between the "
            f"grader's readings, so that what it keeps would look smaller. "
            f"Keep no blocks in your module, and release what a run "
            f"leaves once it ends")
