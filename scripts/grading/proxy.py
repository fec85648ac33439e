"""A rank's process group that performs nothing itself: the hub does.

    pg = proxy.init(sock, rank, world_size, timeout_s)   # in a forked rank

Under grading, a build-it rerun's ranks (``ranks.py``) import the student's
module, so whatever a rank counts the student can rewrite. Here every
collective and every point-to-point message of a rank goes, as plain bytes
over a socket the rank inherited, to the hub (``hub.py``) in the rerun's
own process, which no student code runs in: the hub matches the ranks'
calls, computes each result (a sum, a gather, an all-to-all...), sends it
back, and *counts* it. The counts a rerun is graded on are the hub's.

A rank's only channel to the others is the hub: it holds no gloo group.
Every call is answered before it returns (an ``isend`` once the hub holds
the message, an ``irecv`` once the message came), so a returned work is
already complete. ``mark`` tells the hub where a harness's counting window
(``CollectiveCounter``) opens and closes: the hub splits its own record of
the rank's calls there; a rank that drops or moves a mark only makes its
record fail to match what it claims (``labkit.buildit.grade``).

Frames both ways: ``>II`` (header length, payload length), a JSON header,
the payload (the tensors' bytes, C order). No pickle: the hub never runs
what a rank sends.
"""
from __future__ import annotations

import json
import socket
import struct
import threading

import torch
import torch.distributed as dist

MAX_PAYLOAD = 1 << 28      # 256 MiB in one call
MAX_DEPTH = 4              # a header's nesting (the proxy's are 2 deep)
NAME = "labkit_hub"
_LOCK = threading.Lock()
_REDUCE = {"SUM": "sum", "AVG": "avg", "MAX": "max", "MIN": "min",
           "PRODUCT": "product"}


def send_frame(sock, header: dict, *payload) -> None:
    """One frame: the header, then the payload's buffers as they are (a
    rank sends its tensors' own memory, no copy of them: the hub reads
    the rank's memory once the frame arrived, and a copy freed as the
    send returns would be in that count or not, by a race)."""
    parts = [memoryview(p).cast("B") for p in payload if len(p)]
    h = json.dumps(header).encode()
    sock.sendall(struct.pack(">II", len(h), sum(len(p) for p in parts))
                 + h)
    for p in parts:
        sock.sendall(p)


def _exact(sock, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if not k:
            raise ConnectionError("the peer closed its socket")
        got += k
    return bytes(buf)


def _depth(x) -> int:
    """How deeply ``x`` (parsed JSON) nests lists and objects."""
    most, stack = 0, [(x, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (list, dict)):
            if d + 1 > MAX_DEPTH:
                return d + 1
            most = max(most, d + 1)
            stack += [(w, d + 1) for w in
                      (v.values() if isinstance(v, dict) else v)]
    return most


def recv_frame(sock) -> tuple[dict, bytes]:
    hl, pl = struct.unpack(">II", _exact(sock, 8))
    if hl > 1 << 20 or pl > MAX_PAYLOAD:
        raise ValueError("a frame over the limits")
    try:
        header = json.loads(_exact(sock, hl))
    except RecursionError:
        raise ValueError("a frame nested deeper than the hub reads") \
            from None
    if _depth(header) > MAX_DEPTH:
        raise ValueError(f"a frame nested deeper than {MAX_DEPTH} levels")
    if type(header) is not dict:
        raise ValueError("a frame whose header is not an object")
    return header, _exact(sock, pl)


def _bytes(tensors) -> list:
    """The tensors' bytes as buffers of their own memory (no copy)."""
    return [t.detach().contiguous().view(-1).view(torch.uint8).numpy()
            for t in tensors if t.numel()]


def _fill(tensors, payload: bytes) -> None:
    at = 0
    for t in tensors:
        n = t.numel() * t.element_size()
        if n:
            src = torch.frombuffer(bytearray(payload[at:at + n]),
                                   dtype=t.dtype).view(t.shape)
            with torch.no_grad():
                t.copy_(src)
        at += n


def _done(result):
    from torch._C._distributed_c10d import _create_work_from_future
    fut = torch.futures.Future()
    fut.set_result(result)
    return _create_work_from_future(fut)    # complete: the hub answered


def _op(opts) -> str:
    op = getattr(opts, "reduceOp", None)
    for k, v in _REDUCE.items():
        if op is None or op == getattr(dist.ReduceOp, k):
            return v
    raise ValueError(f"reduce op {op} is not supported by the grader")


class HubGroup(dist.ProcessGroup):
    """``torch.distributed``'s default group, answered by the hub."""

    def __init__(self, sock, rank: int, world: int, timeout_s: float):
        super().__init__(rank, world)
        self._sock, self._rank, self._world = sock, rank, world
        self._lock = _LOCK      # one socket, whichever group calls
        sock.settimeout(timeout_s)

    def size(self):
        return self._world

    def getBackendName(self):
        return NAME

    @property
    def group_name(self):
        return "0"       # the only group: the default one

    def _call(self, header: dict, ins=(), outs=()):
        ins = list(ins)
        like = ins[0] if ins else outs[0] if outs else torch.empty(0)
        header = {**header, "dtype": str(like.dtype)[6:],
                  "numel": [t.numel() for t in ins],
                  "out_numel": sum(t.numel() for t in outs)}
        with self._lock:
            try:
                send_frame(self._sock, header, *_bytes(ins))
                reply, payload = recv_frame(self._sock)
            except socket.timeout:
                raise RuntimeError("timed out waiting for the other ranks")
        if reply.get("error"):
            raise RuntimeError(str(reply["error"]))
        _fill(outs, payload)
        return _done(list(outs))

    def mark(self, kind: str) -> None:
        self._call({"op": "mark", "mark": kind})

    def point(self, name: str, rows: int = 0):
        """A harness's point (``labkit.buildit.points``): the hub records
        where it fell and reads this rank's memory before it answers;
        with ``rows``, its answer is the hub's weights, one per row (a
        list of floats; else None)."""
        head = {"op": "mark", "mark": "point", "name": str(name)}
        if not rows:
            self._call(head)
            return None
        out = torch.empty(int(rows), dtype=torch.float64)
        self._call({**head, "scale": True}, (), [out])
        return out.tolist()

    def deal(self, out) -> None:
        """Fill ``out`` (flat float32) with this rank's share of the data,
        drawn by the hub from a seed no rank holds
        (``labkit.buildit.dealt``)."""
        self._call({"op": "deal"}, (), [out])

    # collectives -------------------------------------------------------
    # each call is shown to the rank's own dispatch modes as the c10d
    # operator gloo's group would run (``_seen``), so that a harness's
    # counter and timelines read the same records as on gloo
    def allreduce(self, tensors, opts=None):
        head = {"op": "all_reduce", "reduce": _op(opts)}
        return _seen("allreduce_", (tensors, self.boxed()),
                     lambda: self._call(head, tensors, tensors))

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def allgather(self, output_lists, inputs, opts=None):
        outs = [t for lst in output_lists for t in lst]
        return _seen("allgather_", (output_lists, inputs, self.boxed()),
                     lambda: self._call({"op": "all_gather"}, inputs, outs))

    def all_gather_single(self, out, inp, opts=None):
        return _seen("_allgather_base_", (out, inp, self.boxed()),
                     lambda: self._call({"op": "all_gather"}, [inp], [out]))

    def all_gather_single_coalesced(self, outs, ins, opts=None):
        for o, i in zip(outs, ins):
            self.all_gather_single(o, i, opts)
        return _done(list(outs))

    def reduce_scatter(self, outs, input_lists, opts=None):
        ins = [t for lst in input_lists for t in lst]
        return _seen("reduce_scatter_", (outs, input_lists, self.boxed()),
                     lambda: self._call({"op": "reduce_scatter",
                                         "reduce": _op(opts)}, ins, outs))

    def reduce_scatter_single(self, out, inp, opts=None):
        return _seen("_reduce_scatter_base_", (out, inp, self.boxed()),
                     lambda: self._call({"op": "reduce_scatter",
                                         "reduce": _op(opts)}, [inp], [out]))

    def reduce_scatter_single_coalesced(self, outs, ins, opts=None):
        for o, i in zip(outs, ins):
            self.reduce_scatter_single(o, i, opts)
        return _done(list(outs))

    def all_to_all_single(self, out, inp, out_splits, in_splits,
                          opts=None):
        row = inp[0].numel() if inp.dim() and inp.shape[0] else 0
        n = inp.shape[0] if inp.dim() else 0
        splits = list(in_splits or []) or [n // self._world] * self._world
        head = {"op": "all_to_all", "splits": [int(k) * row for k in splits]}
        return _seen("alltoall_base_", (out, inp, self.boxed(), out_splits,
                                        in_splits),
                     lambda: self._call(head, [inp], [out]))

    def alltoall(self, outs, ins, opts=None):
        head = {"op": "all_to_all", "splits": [t.numel() for t in ins]}
        return _seen("alltoall_", (outs, ins, self.boxed()),
                     lambda: self._call(head, ins, outs))

    def broadcast(self, tensors, opts=None):
        root = int(getattr(opts, "rootRank", 0))
        return _seen("broadcast_", (tensors, self.boxed()),
                     lambda: self._call({"op": "broadcast", "root": root},
                                        tensors, tensors))

    def barrier(self, opts=None):
        return _seen("barrier", (torch.empty(0), self.boxed()),
                     lambda: self._call({"op": "barrier"}))

    # point to point ----------------------------------------------------
    def send(self, tensors, dst, tag=0):
        head = {"op": "send", "peer": int(dst), "tag": int(tag)}
        return _seen("send", (tensors, self.boxed(), dst, tag),
                     lambda: self._call(head, tensors))

    def recv(self, tensors, src, tag=0):
        head = {"op": "recv", "peer": int(src), "tag": int(tag)}
        return _seen("recv_", (tensors, self.boxed(), src, tag),
                     lambda: self._call(head, outs=tensors))


class _Op:
    """What a dispatch mode is handed for one call: a c10d operator's
    name and a body (the hub's answer)."""
    namespace = "c10d"

    def __init__(self, name: str, body):
        self._schema = type("Schema", (), {"name": "c10d::" + name})()
        self._body = body

    def __call__(self, *args, **kwargs):
        return self._body()


def _seen(name: str, args: tuple, body):
    """``body()``, shown first to the innermost dispatch mode of this
    thread as c10d's ``name`` on ``args`` (switched off while it runs, as
    the dispatcher does): the rank's ``CollectiveCounter`` sees the call."""
    from torch.utils._python_dispatch import (_get_current_dispatch_mode,
                                              _pop_mode_temporarily)
    if _get_current_dispatch_mode() is None:
        return body()
    with _pop_mode_temporarily() as mode:
        return mode.__torch_dispatch__(_Op(name, body), (), args, {})


def init(sock, rank: int, world: int, timeout_s: float) -> HubGroup:
    """Make the hub's group the default group of this process."""
    def make(store, r, w, timeout):
        if w != world:
            raise RuntimeError("the grader runs every rank in one group: "
                               "a part needs no group of some ranks")
        return HubGroup(sock, r, w, timeout_s)
    if NAME not in dist.Backend.backend_list:
        dist.Backend.register_backend(NAME, make, devices=["cpu"])
    dist.init_process_group(NAME, store=dist.HashStore(), rank=rank,
                            world_size=world)
    return dist.distributed_c10d._get_default_group()
