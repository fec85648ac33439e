"""scripts/grading/rank_ns.py: from inside a rank (forked, walled as a
rerun's rank is: its namespaces, its seccomp filter, its Landlock box),
every channel to another rank but the hub's fails: System V shared memory
and message queues, POSIX message queues, pathname and abstract Unix
sockets, UDP and TCP on loopback; and every place outside its memory
where it could park bytes (a memfd, a pipe, a socket pair, a kernel key,
an extended attribute). And the namespaces alone already hide
what another process opened (the filter's second wall)."""
import ctypes
import json
import os
import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from grading import rank_box, rank_ns, seccomp  # noqa: E402

pytestmark = pytest.mark.skipif(
    seccomp.program(extra=seccomp.RANK_CALLS) is None,
    reason="no seccomp program for this architecture")
IPC_CREAT = 0o1000
KEY = 0x4849 + os.getpid()
libc = ctypes.CDLL(None, use_errno=True)


def in_rank(tmp_path, probe, walls=("ns", "filter", "box")) -> dict:
    """What ``probe(work)`` returns in a forked child behind ``walls``."""
    work = tmp_path / "work"
    (work / "mine").mkdir(parents=True, exist_ok=True)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            if "ns" in walls:
                assert rank_ns.unshare()
            if "filter" in walls:
                assert rank_ns.filter_channels()
            if "box" in walls:
                rank_box.enter([work / "mine"], shared=[work])
            out = probe(work)
        except BaseException as e:  # noqa: BLE001
            out = {"crash": repr(e)}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data)


def errno_of(fn) -> str:
    """'ok', or the errno's name a call failed with."""
    try:
        fn()
        return "ok"
    except OSError as e:
        return os.strerror(e.errno) if e.errno else type(e).__name__


def c_call(name, *args):
    def call():
        if getattr(libc, name)(*args) == -1:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
    return call


def mq_open(name: bytes, create: bool):
    return c_call("mq_open", name, ctypes.c_int(os.O_RDWR | (
        os.O_CREAT if create else 0)), ctypes.c_int(0o600), None)


def unix(path):
    def go():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(path)
    return go


def udp():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"x", ("127.0.0.1", 9))


def tcp(port):
    def go():
        with socket.create_connection(("127.0.0.1", port), 2):
            pass
    return go


CHANNELS = {
    "sysv shm": lambda w: c_call("shmget", KEY, 4096, IPC_CREAT | 0o600),
    "sysv msg": lambda w: c_call("msgget", KEY, IPC_CREAT | 0o600),
    "posix mq": lambda w: mq_open(b"/rank-ns-%d" % os.getpid(), True),
    "unix path": lambda w: unix(str(w / "peer.sock")),
    "unix abstract": lambda w: unix(b"\0rank-ns-peer"),
    "udp loopback": lambda w: udp,
    "tcp loopback": lambda w: tcp(9),
}


@pytest.mark.parametrize("channel", sorted(CHANNELS))
def test_a_rank_opens_no_channel_of_its_own(tmp_path, channel):
    got = in_rank(tmp_path, lambda w: errno_of(CHANNELS[channel](w)))
    assert got == "Operation not permitted", got


def xattr(w):
    f = w / "mine" / "f"
    f.write_bytes(b"")
    return lambda: os.setxattr(f, "user.parked", b"x" * 1024)


# where a rank could park bytes outside its process (its memory count,
# scripts/grading/memory.py): refused by the filter
PARKING = {
    "memfd": lambda w: lambda: os.memfd_create("parked"),
    "memfd_secret": lambda w: c_call("syscall", 447, 0),
    "pipe": lambda w: os.pipe,
    "socketpair": lambda w: socket.socketpair,
    "kernel key": lambda w: c_call("syscall", 248 if os.uname().machine
                                   == "x86_64" else 217, b"user", b"k",
                                   b"x" * 1024, 1024, -4),
    "xattr": xattr,
    # a queued signal to itself carries a siginfo of the rank's bytes
    "signal queue": lambda w: c_call(
        "syscall", 129 if os.uname().machine == "x86_64" else 138,
        os.getpid(), 34, ctypes.create_string_buffer(128)),
}


@pytest.mark.parametrize("place", sorted(PARKING))
def test_a_rank_parks_nothing_outside_its_memory(tmp_path, place):
    got = in_rank(tmp_path, lambda w: errno_of(PARKING[place](w)))
    assert got == "Operation not permitted", got


def test_the_hubs_socket_still_carries(tmp_path):
    """The inherited socket pair (the hub's) is untouched by the walls."""
    here, there = socket.socketpair()

    def probe(work):
        there.sendall(b"ping")
        return there.recv(4).decode()
    pid_out = {}

    def serve():
        pid_out["got"] = here.recv(4)
        here.sendall(b"pong")
    import threading
    t = threading.Thread(target=serve)
    t.start()
    got = in_rank(tmp_path, probe)
    t.join(10)
    assert got == "pong" and pid_out["got"] == b"ping"


def test_the_namespaces_alone_hide_another_process_s_channels(tmp_path):
    """What this process opened (a SysV segment and queue, a POSIX queue,
    an abstract socket, a UDP and a TCP port on loopback) is not there
    for a child in namespaces of its own, even without the filter."""
    shm = libc.shmget(KEY, 4096, IPC_CREAT | 0o600)
    msg = libc.msgget(KEY, IPC_CREAT | 0o600)
    name = b"/rank-ns-%d" % os.getpid()
    mq = libc.mq_open(name, ctypes.c_int(os.O_RDWR | os.O_CREAT),
                      ctypes.c_int(0o600), None)
    ab = socket.socket(socket.AF_UNIX)
    ab.bind(b"\0rank-ns-%d" % os.getpid())
    ab.listen()
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    try:
        assert min(shm, msg, mq) >= 0
        got = in_rank(tmp_path, lambda w: {
            "shm": errno_of(c_call("shmget", KEY, 4096, 0o600)),
            "msg": errno_of(c_call("msgget", KEY, 0o600)),
            "mq": errno_of(mq_open(name, False)),
            "abstract": errno_of(unix(b"\0rank-ns-%d" % os.getppid())),
            "udp": errno_of(udp),
            "tcp": errno_of(tcp(port))}, walls=("ns",))
    finally:
        libc.shmctl(shm, 0, None)          # IPC_RMID
        libc.msgctl(msg, 0, None)
        libc.mq_unlink(name)
        ab.close()
        srv.close()
    gone = "No such file or directory"
    assert got == {"shm": gone, "msg": gone, "mq": gone,
                   "abstract": "Connection refused",
                   "udp": "Network is unreachable",
                   "tcp": "Network is unreachable"}, got


PROBE = r'''
import ctypes as _c, json as _j, os as _o, socket as _s
_libc = _c.CDLL(None, use_errno=True)


def _try(fn):
    try:
        return "ok" if fn() != -1 else _o.strerror(_c.get_errno())
    except OSError as e:
        return _o.strerror(e.errno) if e.errno else type(e).__name__


def _sock(family, kind, where):
    with _s.socket(family, kind) as k:
        k.connect(where)
    return 0


print("CHANNELS", _j.dumps({
    "sysv shm": _try(lambda: _libc.shmget(4242, 4096, 0o1600)),
    "sysv msg": _try(lambda: _libc.msgget(4242, 0o1600)),
    "posix mq": _try(lambda: _libc.mq_open(b"/rank", _o.O_RDWR | _o.O_CREAT,
                                           0o600, None)),
    "unix path": _try(lambda: _sock(_s.AF_UNIX, _s.SOCK_STREAM, "/tmp/x")),
    "unix abstract": _try(lambda: _sock(_s.AF_UNIX, _s.SOCK_STREAM,
                                        b"\0x")),
    "udp loopback": _try(lambda: _sock(_s.AF_INET, _s.SOCK_DGRAM,
                                       ("127.0.0.1", 9))),
    "tcp loopback": _try(lambda: _sock(_s.AF_INET, _s.SOCK_STREAM,
                                       ("127.0.0.1", 9))),
    "memfd": _try(lambda: _o.memfd_create("parked")),
    "pipe": _try(lambda: _o.pipe() and 0)}), flush=True)
'''


@pytest.mark.distributed
def test_from_inside_a_real_rank_every_channel_fails(tmp_path):
    """The same channels, tried by a student's module as a rerun's rank on
    the hub imports it (``ranks.fork_ranks``): each refused, and the
    answer key beside the probe still scores full marks on the hub."""
    from test_grading_points import sharding_source
    from test_grading_ranks import fresh_fork_ranks

    from labkit import buildit
    h = buildit.harness("sharding")
    got = fresh_fork_ranks("sharding", PROBE + sharding_source("key"),
                           h.HIDDEN, 2, tmp_path, 60, True)
    assert got["error"] is None, got["error"]
    rows = buildit.grade({**got, "loopback_bytes": 0})
    assert all(r["passed"] for r in rows), rows
    for r in range(2):
        log = (tmp_path / "run" / f"rank-{r}.log").read_text()
        seen = json.loads(log.split("CHANNELS ", 1)[1].splitlines()[0])
        assert seen == {k: "Operation not permitted" for k in
                        [*CHANNELS, "memfd", "pipe"]}, seen
