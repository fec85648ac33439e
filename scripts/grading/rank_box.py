"""Each rank of a rerun in a box of its own: no rank reaches another's files.

    rank_box.enter([run_dir / "r1"], read=[code],
                   shared=[work])                 # in a forked rank

The ranks of a build-it rerun share one jail (``jail.py``): its writable
tmpfs mounts (``/tmp``, the work folder, ``/dev/shm``) would be a channel
between them that the hub (``hub.py``) neither sees nor counts: a rank
could write its shard, a count or a whole result for another to read.
So each rank, after the fork and before any student code runs, restricts
itself with Landlock (the kernel's unprivileged access control, Linux 5.13
and later; ``Documentation/userspace-api/landlock.rst``):

- files: it may write only beneath its ``own`` folders (its result
  folder, its ``TMPDIR``), so no rank writes where another could read
  (``/tmp``, ``/dev/shm``, the work folder are closed to writes); it may
  read everything but the ``shared`` folder that holds every rank's own
  (the system, the Python, the course, every folder of ``sys.path``),
  the files in ``read`` (the student's module) and its own folders;
- network (Landlock ABI 4): no TCP bind or connect at all, so no rank can
  start a group of its own (the hub is the only channel);
- scopes (ABI 6): no abstract Unix socket and no signal to a process
  outside its own Landlock domain, so to no other rank.

``no_new_privs`` is set first (Landlock needs it; it also keeps any
setuid program from lifting the restriction). A rule a kernel cannot
enforce (an older ABI) is left out, and ``enter`` returns the ABI, 0 when
the kernel has no Landlock: the jail's own limits then stay the only
ones (``labkit.buildit.counted`` still fails a rank that used the
network). ``grade.py`` names what the kernel gives (``describe``) in
its summary and in every row's ``isolation``.
"""
from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

_SYS_CREATE, _SYS_ADD, _SYS_RESTRICT = 444, 445, 446   # x86_64, arm64
_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
# access rights (include/uapi/linux/landlock.h), by the ABI that added them
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1, 2, 4, 8
_FS = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1,
       5: (1 << 16) - 1}
_NET_TCP = 3           # BIND_TCP | CONNECT_TCP (ABI 4)
_SCOPES = 3            # ABSTRACT_UNIX_SOCKET | SIGNAL (ABI 6)
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | (1 << 14) | (1 << 15)
READ = EXECUTE | READ_FILE | READ_DIR


class _Ruleset(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _Beneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("fd", ctypes.c_int32)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def abi() -> int:
    """The kernel's Landlock ABI version; 0 without Landlock."""
    v = _libc().syscall(_SYS_CREATE, None, ctypes.c_size_t(0),
                        ctypes.c_uint32(1))
    return max(v, 0)


def describe(v: int) -> tuple[str, str]:
    """(the isolation field's word, one line for the instructor) for a
    kernel whose Landlock ABI is ``v`` (``abi()``)."""
    if v < 1:
        return "no rank box", (
            "no rank box: this kernel has no Landlock (Linux 5.13+ with "
            "landlock among its LSMs), so the ranks of a build-it rerun "
            "share its jail's /tmp, work folder and /dev/shm, a channel "
            "between them the hub does not count")
    missing = [what for need, what in ((4, "TCP is not refused: the "
                                        "loopback check alone"),
                                       (6, "signals and abstract sockets "
                                        "between ranks are not refused"))
               if v < need]
    return f"landlock {v}", (
        f"rank box: Landlock ABI {v}, each rank writes only in its own "
        "folder and reads none of the others'"
        + "".join(f"; {m}" for m in missing))


def _fs_all(v: int) -> int:
    return _FS[max(k for k in _FS if k <= v)]


def readable_roots(shared: list[Path]) -> list[Path]:
    """The folders to grant read on: every entry of ``/`` but the shared
    writable places, descending into a folder that holds one of them."""
    shared = [p.resolve() for p in shared]
    out, stack = [], [Path("/")]
    while stack:
        d = stack.pop()
        try:
            kids = sorted(d.iterdir())
        except OSError:
            continue
        for k in kids:
            if k.is_symlink():
                continue
            if any(k == s for s in shared):
                continue
            if any(s.is_relative_to(k) for s in shared) and k.is_dir():
                stack.append(k)
            else:
                out.append(k)
    return out


def enter(own: list[Path], read: list[Path] = (),
          shared: list[Path] = ()) -> int:
    """Restrict this process (and all it starts) as the docstring says;
    the Landlock ABI it used (0: none here)."""
    v = abi()
    if v < 1:
        return 0
    libc = _libc()
    fs = _fs_all(v)
    attr = _Ruleset(fs, _NET_TCP if v >= 4 else 0,
                    _SCOPES if v >= 6 else 0)
    size = ctypes.sizeof(_Ruleset) if v >= 6 else (16 if v >= 4 else 8)
    rs = libc.syscall(_SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(size),
                      ctypes.c_uint32(0))
    if rs < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        places = [Path(p).resolve() for p in shared]
        rules = [(p, READ) for p in readable_roots(places)]
        rules += [(Path(p), READ) for p in read]
        # what Python imports, wherever it lies, unless it holds the
        # ranks' folders
        for p in {sys.prefix, sys.base_prefix, *sys.path}:
            q = Path(p or ".").resolve()
            if not any(q.is_relative_to(s) or s.is_relative_to(q)
                       for s in places):
                rules.append((q, READ))
        rules += [(Path("/dev/null"), READ_FILE | WRITE_FILE)]
        rules += [(Path(p), fs) for p in own]
        for path, rights in rules:
            _add(libc, rs, path, rights, fs)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "no_new_privs")
        if libc.syscall(_SYS_RESTRICT, rs, ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(rs)
    return v


def _add(libc, rs: int, path: Path, rights: int, fs: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return                      # gone or unreadable: nothing to grant
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS
        rule = _Beneath(rights & fs, fd)
        if libc.syscall(_SYS_ADD, rs, ctypes.c_int(_PATH_BENEATH),
                        ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
    finally:
        os.close(fd)
