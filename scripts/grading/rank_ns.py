"""Each rank of a rerun on the hub talks to no other rank but through it.

    rank_ns.enter()        # in a forked rank, before its Landlock box

The ranks of a rerun are forked in one jail (``jail.py``), so they would
share its IPC namespace (System V shared memory, message queues,
semaphores, POSIX message queues) and its network namespace (loopback
UDP and TCP, abstract Unix sockets): channels the hub (``hub.py``)
neither sees nor counts. Each rank, after the fork and before any student
code runs:

- unshares a user, a network and an IPC namespace of its own
  (``unshare(2)``; no privilege needed: the user namespace grants the
  other two). Its loopback is down and its IPC objects are its own, so a
  key, a queue's name or a port another rank opens is not there;
- installs a seccomp filter (``seccomp.RANK_CALLS``) that refuses
  ``socket`` and ``io_uring_setup`` (a pathname Unix socket in a rank's
  folder would otherwise connect across the namespaces; the rank's hub
  socket is inherited, never opened) and the System V and POSIX IPC
  calls (where a kernel refuses the namespaces, the filter alone closes
  them).

The hub's socket pair (fd 3) is kept as it was: the only channel. What
the kernel gave is in ``enter``'s answer, which ``grade.py`` does not
need: the filter always holds; the namespaces are a second wall.
"""
from __future__ import annotations

import ctypes
import struct

from grading import seccomp

CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWNET = 0x08000000, 0x10000000, \
    0x40000000
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def unshare() -> bool:
    """A user, network and IPC namespace of this process's own (False:
    the kernel refused; the filter still holds)."""
    return _libc().unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWIPC) == 0


def filter_channels() -> bool:
    """Install the rank's seccomp filter (False: unknown architecture)."""
    prog = seccomp.program(extra=seccomp.RANK_CALLS)
    if prog is None:
        return False
    libc = _libc()
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "no_new_privs")
    buf = ctypes.create_string_buffer(prog, len(prog))
    # struct sock_fprog: unsigned short len; struct sock_filter *filter
    fprog = struct.pack("HxxxxxxP", len(prog) // 8, ctypes.addressof(buf))
    arg = ctypes.create_string_buffer(fprog, len(fprog))
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER,
                  ctypes.c_void_p(ctypes.addressof(arg)), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp")
    return True


def enter() -> dict:
    """Both walls, as the docstring says; what this kernel gave."""
    return {"namespaces": unshare(), "filter": filter_channels()}
