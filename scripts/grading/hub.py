"""The hub: performs and counts every collective of a rerun's ranks.

    counts = Hub(socks, timeout_s).serve(alive)     # in rerun.py's process

Each rank's process group (``proxy.py``) sends its calls here as plain
bytes. The hub matches the ranks' k-th collectives (the same operation,
dtype and sizes, or every rank gets an error, as a real group would fail),
computes the results in this process and answers each rank; a send waits
here until its receive comes. Nothing a rank sends is run: headers are
JSON, payloads raw tensor bytes.

What it returns is this process's own count of each rank
(``hub_count.py``: its windows, what it did outside them, its points and
its memory) and ``wire_bytes`` (what a ring would have sent: the floor
``labkit.buildit.grade`` checks). With ``deal``, it also hands each rank
its share of the part's data, drawn here from a seed no rank holds
(``labkit.buildit.dealt``).
"""
from __future__ import annotations

import random
import selectors
import time

import torch

from grading.hub_count import MAX_POINTS, Count
from grading.proxy import recv_frame, send_frame
from labkit.buildit.points import WEIGHTS

_DTYPES = {str(d)[6:]: d for d in (torch.float32, torch.float64, torch.float16,
                               torch.bfloat16, torch.int64, torch.int32,
                               torch.int16, torch.int8, torch.uint8,
                               torch.bool)}
_RNG = random.SystemRandom()
MAX_ROWS = 64     # the weights one scaled point may ask for (a batch)
_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                "broadcast", "barrier")


def _reduce(xs, how):
    st = torch.stack(xs)
    if how == "avg":
        return st.sum(0) / len(xs)
    return {"sum": st.sum, "max": st.amax, "min": st.amin,
            "product": st.prod}[how](0)


def _tail(x) -> list:
    """A message's last two values (a harness's header, e.g. the pipeline
    stage's micro-batch and slot clock), as the hub saw them."""
    if not x.is_floating_point():
        return []
    return [float(v) for v in x[-2:].double().tolist()]


class Hub:
    def __init__(self, socks: list, timeout_s: float, pids=None,
                 deal=None, dirs=None, cgroups=None):
        self.socks, self.n = socks, len(socks)
        self.count = Count(self.n, pids, dirs, cgroups)
        self.deal = deal           # rank -> its share of the data, or None
        self.deadline = time.monotonic() + timeout_s
        self.pending = {}          # rank -> (header, tensor) of a collective
        self.recvs = {}            # rank -> header of a waiting recv
        self.mail = {}             # (src, dst, tag) -> [tensor, ...]
        self.dead = set()
        self.wire = 0
        self.scales, self.scaled = [], [0] * self.n   # points.scaled

    # answering ---------------------------------------------------------
    def _answer(self, r: int, tensor=None, error=None) -> None:
        if r in self.dead:
            return
        try:
            if error:
                send_frame(self.socks[r], {"error": error})
            else:
                data = b"" if tensor is None or not tensor.numel() else \
                    tensor.contiguous().view(torch.uint8).numpy().tobytes()
                send_frame(self.socks[r], {"ok": True}, data)
        except OSError:
            self.dead.add(r)

    def _tensor(self, h: dict, payload: bytes):
        dtype = _DTYPES.get(h.get("dtype"))
        if dtype is None:
            raise ValueError(f"dtype {h.get('dtype')!r} is not supported")
        numel = [int(k) for k in h.get("numel", [])]
        size = dtype.itemsize if hasattr(dtype, "itemsize") else \
            torch.empty(0, dtype=dtype).element_size()
        if sum(numel) * size != len(payload) or min(numel, default=0) < 0:
            raise ValueError("a message whose sizes do not match its bytes")
        flat = torch.frombuffer(bytearray(payload), dtype=dtype) \
            if payload else torch.empty(0, dtype=dtype)
        return flat, numel

    def _collective(self) -> None:
        calls = [self.pending[r] for r in range(self.n)]
        self.pending.clear()
        (h0, x0, _), n = calls[0], self.n
        op = h0["op"]
        same = all(h["op"] == op and h["dtype"] == h0["dtype"]
                   for h, _, _ in calls)
        if same and op in ("all_reduce", "reduce_scatter", "broadcast"):
            same = all(h.get("reduce") == h0.get("reduce") and
                       x.numel() == x0.numel() for h, x, _ in calls)
        if not same:
            for r in range(n):
                self._answer(r, error="the ranks' collectives do not match "
                             f"(rank 0: {op}, others: " + ", ".join(
                                 sorted({h['op'] for h, _, _ in calls}))
                             + ")")
            return
        es = x0.element_size()
        outs = [None] * n
        try:
            if op == "all_reduce":
                red = _reduce([x for _, x, _ in calls], h0["reduce"])
                outs = [red] * n
                counted, ring = x0.numel() * es, 2 * (n - 1) / n
            elif op == "all_gather":
                cat = torch.cat([x for _, x, _ in calls])
                outs = [cat] * n
                counted, ring = cat.numel() * es, (n - 1) / n
            elif op == "reduce_scatter":
                red = _reduce([x for _, x, _ in calls], h0["reduce"])
                k = [int(h["out_numel"]) for h, _, _ in calls]
                if sum(k) != red.numel():
                    raise ValueError("reduce_scatter: shards do not add up")
                outs = list(torch.split(red, k))
                counted, ring = x0.numel() * es, (n - 1) / n
            elif op == "all_to_all":
                parts = []
                for h, x, _ in calls:
                    s = [int(v) for v in h.get("splits", [])]
                    if len(s) != n or sum(s) != x.numel():
                        raise ValueError("all_to_all: splits do not match")
                    parts.append(torch.split(x, s))
                outs = [torch.cat([parts[src][dst] for src in range(n)])
                        for dst in range(n)]
                for dst, (h, _, _) in enumerate(calls):
                    if outs[dst].numel() != int(h["out_numel"]):
                        raise ValueError("all_to_all: output sizes differ")
                counted, ring = x0.numel() * es, (n - 1) / n
            elif op == "broadcast":
                root = int(h0.get("root", 0))
                outs = [calls[root][1]] * n
                counted, ring = x0.numel() * es, (n - 1) / n
            else:                                  # barrier
                counted, ring = 0, 0
        except (ValueError, RuntimeError, IndexError) as e:
            for r in range(n):
                self._answer(r, error=f"{op}: {e}")
            return
        sq = float(outs[0].double().square().sum()) \
            if op == "all_reduce" and outs[0].is_floating_point() else 0.0
        for r, (h, x, _) in enumerate(calls):
            # an all-gather counts its output, the rest the rank's input
            mine = counted if op in ("all_gather", "barrier") else \
                x.numel() * es
            self.count.call(r, op, mine, h["dtype"], sumsq=sq)
            self.wire += int(ring * mine)
            self._answer(r, outs[r])

    def _deliver(self) -> None:
        for dst, h in list(self.recvs.items()):
            box = self.mail.get((int(h["peer"]), dst, int(h["tag"])))
            if box:
                t = box.pop(0)
                del self.recvs[dst]
                if t.numel() != int(h["out_numel"]) or \
                        str(t.dtype)[6:] != h["dtype"]:
                    self._answer(dst, error="recv: the message sent has "
                                 "another size or dtype than the buffer")
                    continue
                self.count.call(dst, "recv", t.numel() * t.element_size(),
                                h["dtype"], int(h["peer"]), _tail(t))
                self._answer(dst, t)

    def _handle(self, r: int, h: dict, payload: bytes) -> None:
        op = h.get("op")
        if op == "mark":
            if h.get("mark") == "point" and \
                    len(self.count.points[r]) >= MAX_POINTS:
                self._answer(r, error=f"more than {MAX_POINTS} points: "
                             "the grader refuses the rest")
                return
            scale = None
            rows = h.get("out_numel")
            if h.get("mark") == "point" and h.get("scale") is True and \
                    h.get("dtype") == "float64" and type(rows) is int \
                    and 1 <= rows <= MAX_ROWS:
                # a weight per row no rank can foresee (points.scaled),
                # drawn as the first rank's k-th point arrives, the same
                # for every rank's k-th: one gradient across ranks
                k = self.scaled[r]
                self.scaled[r] += 1
                while len(self.scales) <= k:
                    self.scales.append([])
                drawn = self.scales[k]
                while len(drawn) < rows:
                    drawn.append(_RNG.choice(WEIGHTS))
                scale = drawn[:rows]
            self.count.mark(r, h.get("mark"), h.get("name"), scale)
            self._answer(r, None if scale is None else
                         torch.tensor(scale, dtype=torch.float64))
            return
        if op == "deal":           # ``labkit.buildit.dealt``
            x = self.deal(r) if self.deal else None
            if x is None or h.get("dtype") != "float32" or \
                    x.numel() != int(h.get("out_numel", -1)):
                self._answer(r, error="the grader deals no data of that "
                             "size to this rank")
            else:
                self._answer(r, x)
            return
        x, _ = self._tensor(h, payload)
        if op in _COLLECTIVES:
            self.pending[r] = (h, x, payload)
            if len(self.pending) == self.n:
                self._collective()
        elif op == "send":
            dst = int(h["peer"])
            if not 0 <= dst < self.n or dst == r:
                raise ValueError(f"send to rank {dst}")
            self.mail.setdefault((r, dst, int(h["tag"])), []).append(x)
            nb = x.numel() * x.element_size()
            self.count.call(r, "send", nb, h["dtype"], dst, _tail(x))
            self.wire += nb
            self._answer(r)
        elif op == "recv":
            if not 0 <= int(h["peer"]) < self.n:
                raise ValueError(f"recv from rank {h['peer']}")
            self.recvs[r] = h
        else:
            raise ValueError(f"unknown operation {op!r}")
        self._deliver()

    def serve(self, alive) -> dict:
        """Answer the ranks until every socket closed, ``alive()`` is
        false or the deadline passed; the counts."""
        threads = torch.get_num_threads()
        # no intra-op pool in this process: it may fork ranks again
        torch.set_num_threads(1)
        try:
            return self._serve(alive)
        finally:
            torch.set_num_threads(threads)

    def _serve(self, alive) -> dict:
        sel = selectors.DefaultSelector()
        for r, s in enumerate(self.socks):
            s.settimeout(30.0)
            sel.register(s, selectors.EVENT_READ, r)
        while len(self.dead) < self.n and time.monotonic() < self.deadline:
            events = sel.select(timeout=0.05)
            if not events and not alive():
                break
            for key, _ in events:
                r = key.data
                try:
                    h, payload = recv_frame(key.fileobj)
                except (ConnectionError, OSError, ValueError):
                    self._drop(r, sel)     # closed, or not our protocol
                    continue
                try:
                    self._handle(r, h, payload)
                except Exception as e:  # noqa: BLE001 - the rank's data
                    self._answer(r, error="the grader refused a call: "
                                 f"{type(e).__name__}: {str(e)[:200]}")
            if self.pending and any(r in self.dead for r in range(self.n)):
                for r in list(self.pending):
                    self._answer(r, error="another rank ended before this "
                                 "collective (Connection closed)")
                self.pending.clear()
        sel.close()
        return {**self.count.record(), "wire_bytes": self.wire}

    def _drop(self, r: int, sel) -> None:
        self.dead.add(r)
        try:
            sel.unregister(self.socks[r])
        except (KeyError, ValueError):
            pass
        self.pending.pop(r, None)
        self.recvs.pop(r, None)
        for dst, h in list(self.recvs.items()):     # never to come
            if int(h["peer"]) == r and not self.mail.get((r, dst,
                                                          int(h["tag"]))):
                del self.recvs[dst]
                self._answer(dst, error=f"rank {r} ended before it sent "
                             "(Connection closed)")
