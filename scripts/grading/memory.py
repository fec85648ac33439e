"""A rank's memory, read from outside its process (the hub's side).

    memory.returned()        # in a rank, before any student code runs
    resident(pid) -> int     # in the hub: the rank's anonymous bytes now
    folder_bytes(path) -> int  # in the hub: what the rank's folder holds

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

``/proc`` counts only what is mapped into the process: a rank could park
what it keeps outside it during backward and take it back in ``step()``.
Its own folder (its ``TMPDIR``, on the jail's tmpfs: pages in memory) is
the one place its Landlock box lets it write, so the hub adds what that
folder holds to each reading (``folder_bytes``); the other places are
closed by the rank's seccomp filter (``seccomp.RANK_CALLS``: no memfd,
no System V segment, no pipe or socket pair, no kernel key, no extended
attribute).
"""
from __future__ import annotations

import ctypes
import os

M_MMAP_THRESHOLD = -3      # glibc's mallopt parameter (malloc.h)
THRESHOLD = 64 * 1024
# what an entry of a folder costs beyond its pages: its inode and name
ENTRY = 256


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
    anon, shmem = parts(pid)
    return anon + shmem if anon >= 0 else -1


def parts(pid: int) -> tuple[int, int]:
    """Bytes of process ``pid``'s anonymous memory and of the shared
    memory mapped into it (-1, -1 if it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            text = f.read()
    except OSError:
        return -1, -1
    got = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssShmem"):
            got[key] = int(value.split()[0]) * 1024
    return got.get("RssAnon", 0), got.get("RssShmem", 0)


def folder_bytes(path) -> int:
    """Bytes the files beneath ``path`` hold (their pages, what tmpfs
    keeps in memory, ``st_blocks``), each entry ``ENTRY`` more and its
    name (a name or a link's target can carry bytes too); 0 when there is
    no such folder. Links are not followed."""
    total, stack = 0, [os.fspath(path)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += ENTRY + len(e.name) + st.st_blocks * 512
                    if e.is_symlink():
                        total += st.st_size
                    elif e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
        except OSError:
            continue
    return total
