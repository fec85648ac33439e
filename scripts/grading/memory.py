"""A rank's memory, read from outside its process (the hub's side).

    memory.returned()        # in a rank, before any student code runs
    resident(pid) -> int     # in the hub: the rank's anonymous bytes now

A number a rank computes about its own memory is the student's to
rewrite (its process imports the student's code). ``/proc/PID/status``
is the kernel's count, which the hub (``hub.py``), the ranks' parent,
reads while the rank waits for the hub's answer to a mark: ``RssAnon``
(heap, tensors, Python objects) plus ``RssShmem`` (shared memory, where
a rank could otherwise park what it keeps). The file is readable
without ptrace rights, which the jail denies.

The kernel counts pages, not tensors: a freed tensor leaves the count
only when malloc gives its pages back. glibc serves a request of
``M_MMAP_THRESHOLD`` bytes or more with a mapping of its own, returned
on free; the threshold otherwise rises to the largest freed block (up to
32 MiB), after which big tensors stay in the heap. ``returned`` pins it
at 64 KiB in the rank (before the student's code is imported), so that
every tensor of 64 KiB or more is in the count exactly while it lives.
What remains is noise below a mebibyte (small blocks in malloc's free
lists, Python's arenas, the kernel's per-CPU counting): a memory check
compares differences of megabytes.

A difference of two readings can be staged: a block allocated before the
first and freed before the second. So the hub also reads each rank
before the student's module is imported (``base``), and the checks hold
the readings to what the course's code allocated by then
(``labkit.buildit.held``).
"""
from __future__ import annotations

import ctypes

M_MMAP_THRESHOLD = -3      # glibc's mallopt parameter (malloc.h)
THRESHOLD = 64 * 1024


def returned() -> bool:
    """Tensors of ``THRESHOLD`` bytes or more get mappings of their own,
    given back when freed (glibc; elsewhere: False, nothing changed)."""
    try:
        return bool(ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, THRESHOLD))
    except (OSError, AttributeError):
        return False


def resident(pid: int) -> int:
    """Bytes of process ``pid``'s anonymous and shared memory (-1 if it
    is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            text = f.read()
    except OSError:
        return -1
    kib = 0
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssShmem"):
            kib += int(value.split()[0])
    return kib * 1024
