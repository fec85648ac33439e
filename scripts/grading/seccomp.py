"""A seccomp filter for every jail: no process may trace or read another.

    fd = seccomp.program_fd()     # bwrap --seccomp FD

A classic BPF program (``struct sock_filter``, see seccomp(2)) that makes
``ptrace``, ``process_vm_readv`` and ``process_vm_writev`` fail with EPERM
(and every x32 system call on x86-64, a second numbering of the same
calls). Together with the trusted processes' ``PR_SET_DUMPABLE 0`` (their
``/proc/PID/fd`` and ``mem`` then need CAP_SYS_PTRACE, which no jail has),
no process in a jail can attach to, read or write another one's memory or
open its pipes. No library is needed: the program is a few packed words.

``RANK_CALLS`` (``program(extra=RANK_CALLS)``, installed by each rank of a
rerun on the hub, ``rank_ns.py``) also refuses every channel between
processes the rank could open itself: ``socket`` (its hub socket is
inherited, so a rank needs none: no pathname or abstract Unix socket, no
UDP or TCP), ``io_uring_setup`` (its own sockets), System V shared
memory, message queues and semaphores, and POSIX message queues; and
every place outside its process's memory where a rank could park what
its optimizer keeps during backward and take it back in ``step()``,
unseen by the hub's count (``memory.py``): ``memfd_create`` and
``memfd_secret``, pipes and socket pairs (their buffers), the kernel's
keys, extended attributes (a file's, kept in memory by tmpfs), queued
signals to itself (each a siginfo of the rank's bytes), BPF maps and
perf buffers. Its folder's files are counted instead
(``memory.folder_bytes``).
"""
from __future__ import annotations

import os
import platform
import struct

# (AUDIT_ARCH_*, ptrace, process_vm_readv, process_vm_writev)
ARCHES = {"x86_64": (0xC000003E, 101, 310, 311),
          "aarch64": (0xC00000B7, 117, 270, 271)}
LD_ABS_W, JEQ_K, JGE_K, RET_K = 0x20, 0x15, 0x35, 0x06
ALLOW, ERRNO = 0x7FFF0000, 0x00050000
EPERM = 1
X32_BIT = 0x40000000
# a rank's own channels: socket, io_uring_setup, shmget, shmat, msgget,
# msgsnd, msgrcv, semget, semop, mq_open, mq_timedsend, mq_timedreceive;
# then the places it could park bytes outside its process's memory:
# memfd_create, memfd_secret, pipe2, socketpair, add_key, request_key,
# keyctl, setxattr, lsetxattr, fsetxattr, setxattrat, rt_sigqueueinfo,
# rt_tgsigqueueinfo, bpf, perf_event_open (and x86_64's pipe)
RANK_CALLS = {"x86_64": (41, 425, 29, 30, 68, 69, 70, 64, 65, 240, 242,
                         243, 319, 447, 293, 53, 248, 249, 250, 188, 189,
                         190, 463, 129, 297, 321, 298, 22),
              "aarch64": (198, 425, 194, 196, 186, 189, 188, 190, 193, 180,
                          182, 183, 279, 447, 59, 199, 217, 218, 219, 5, 6,
                          7, 463, 138, 240, 280, 241)}


def _op(code, k, jt=0, jf=0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def program(machine: str | None = None,
            extra: dict | None = None) -> bytes | None:
    """The filter for this machine's architecture (None: unknown arch);
    ``extra`` (e.g. ``RANK_CALLS``): more calls it refuses, by arch."""
    machine = machine or platform.machine()
    arch = ARCHES.get(machine)
    if arch is None:
        return None
    audit, *calls = arch
    calls += (extra or {}).get(machine, ())
    deny = len(calls) + 2          # jumps to the EPERM return below
    ops = [_op(LD_ABS_W, 4),                        # seccomp_data.arch
           _op(JEQ_K, audit, 1, 0), _op(RET_K, ERRNO | EPERM),
           _op(LD_ABS_W, 0)]                        # seccomp_data.nr
    ops.append(_op(JGE_K, X32_BIT, deny - 1, 0))
    for i, nr in enumerate(calls):
        ops.append(_op(JEQ_K, nr, deny - 2 - i, 0))
    ops += [_op(RET_K, ALLOW), _op(RET_K, ERRNO | EPERM)]
    return b"".join(ops)


def program_fd() -> int | None:
    """A readable file descriptor holding the program (for bwrap), or None
    when the architecture is unknown. The caller closes it."""
    prog = program()
    if prog is None:
        return None
    fd = os.memfd_create("grading-seccomp", 0)
    os.write(fd, prog)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
