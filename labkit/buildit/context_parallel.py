"""Build it, lab 11: ring attention, forward and backward, on p ranks.

The student writes ``ring_attention(q, k, v)`` for one rank of the ring:
``q, k, v`` ``[b, heads, n, d]`` are this rank's ``n = s/p`` tokens
(rank ``r`` holds tokens ``r n .. (r+1) n - 1``); it returns this rank's
rows of ``softmax(q k^T / sqrt(d)) v`` over the WHOLE sequence, no mask,
and autograd must give every rank the gradients of its own q, k and v.
Ring attention (Liu et al. 2023; chapter 11): the queries stay, the K/V
blocks go round the ring, the next one travelling (``batch_isend_irecv``)
while this one is computed, each block's result merged into the running
output with the rows' log-sum-exp (the online softmax: Milakov and
Gimelshein 2018; FlashAttention, Dao et al. 2022, Alg. 1). Backward runs
the ring again, and each block's dK/dV travel with it, ``p`` hops, home to
the rank that owns the block.

The harness draws ``q, k, v`` and the output gradient of the whole
sequence, gives each rank its tokens (under grading the hub deals them:
``labkit.buildit.dealt``), counts the collectives
(``CollectiveCounter``) and notes when each received block is first
touched (under grading, as points the hub records: ``from_hub``).
Checks (plain data from every rank): ``output`` and ``grads`` equal one
process's attention of the whole sequence (computed by the checker,
``reference``); ``bytes``: each rank sends and receives, point to point
only, what the ring needs
(``labkit.predict.context_parallel.ring_bytes``: K/V ``p - 1`` hops
forward and backward, dK/dV ``p``); ``overlap``: of each pass's receives
all but one at most are overlapped: between a receive's issue and the
first operation that reads the block, the rank runs a matmul.
"""
from __future__ import annotations

import functools
import json

from labkit.buildit.tensors import cache_key, flat, gap

CONFIG = {"batch": 1, "heads": 2, "tokens": 4, "head_dim": 8, "seed": 0}
# the hidden tests' (other shapes; big enough that what the ring must send
# outweighs the launch's own traffic: labkit.buildit.grade's wire check)
HIDDEN = {"batch": 2, "heads": 3, "tokens": 24, "head_dim": 16, "seed": 1}
TOL = 1e-5
# buildit.smoke's kernel run: a ring of one has no neighbour to send to
# (gloo refuses a pair with itself)
NO_ONE_RANK = ("a ring needs two ranks at least (gloo has no pair with "
               "itself); the real ranks below are the test")
_MATMULS = ("mm", "bmm", "addmm", "baddbmm", "matmul", "einsum")
# the timeline's points (``from_hub``): a receive issued, a matmul while a
# block is pending, a block first read
RECV, MATMUL, READ = "recv", "matmul", "read"


def tensors(cfg, w):
    """``q, k, v, dout`` ``[b, heads, s, d]`` of the whole sequence."""
    import torch
    from labkit.buildit import dealt
    g = torch.Generator().manual_seed(dealt.seed(cfg))
    shape = (cfg["batch"], cfg["heads"], w * cfg["tokens"], cfg["head_dim"])
    return [torch.randn(shape, generator=g) for _ in range(4)]


@functools.lru_cache(maxsize=4)
def _reference(key) -> list:
    import torch
    cfg, w = json.loads(key[0]), key[1]
    q, k, v, dout = (t.double().requires_grad_() for t in tensors(cfg, w))
    att = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, -1)
    out = att @ v
    out.backward(dout.detach())
    return [out.detach(), q.grad, k.grad, v.grad]


def reference(cfg, w) -> list:
    """One process's ``out, dq, dk, dv`` of the whole sequence (float64,
    computed by the checker, never by a rank)."""
    import torch
    with torch.random.fork_rng():      # the caller's RNG stays as it was
        return _reference(cache_key(cfg, w))


def _span(t):
    """The bytes a tensor's view reaches: ``[start, end)``."""
    extent = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + t.element_size() * max(extent, 0)


def _timeline():
    import torch
    from torch.utils._pytree import tree_leaves

    from labkit.buildit import points
    from labkit.measure.collectives import CollectiveCounter

    class Timeline(CollectiveCounter):
        """The counter, plus, for each receive, the matmuls this rank ran
        between its issue and the first operation reading its buffer."""

        def __init__(self):
            super().__init__()
            self.matmuls, self.pending, self.overlap = 0, [], []
            self.received = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            spans = [_span(t) for t in tree_leaves((args, kwargs))
                     if isinstance(t, torch.Tensor) and t.numel()]
            for rec in list(self.pending):
                lo, hi = rec[0]
                if any(a < hi and lo < b for a, b in spans):
                    self.overlap.append(self.matmuls - rec[1])
                    self.pending.remove(rec)
                    points.mark(f"{READ} {rec[2]}")
            n = len(self.records)
            out = super().__torch_dispatch__(func, types, args, kwargs)
            for rec in self.records[n:]:
                if rec["op"] == "recv":
                    bufs = [t for t in tree_leaves(args)
                            if isinstance(t, torch.Tensor)]
                    lo = min(_span(t)[0] for t in bufs)
                    hi = max(_span(t)[1] for t in bufs)
                    self.pending.append([(lo, hi), self.matmuls,
                                         self.received])
                    points.mark(f"{RECV} {self.received}")
                    self.received += 1
            name = func._schema.name.split("::")[-1]
            if name in _MATMULS or "scaled_dot_product" in name:
                self.matmuls += 1
                if self.pending:     # only these count for the overlap
                    points.mark(MATMUL)
            return out

        def report(self):
            s = self.summary()
            return {"ops": sorted(s), "sent": s.get("send", {}).get(
                "bytes", 0), "received": s.get("recv", {}).get("bytes", 0),
                    "overlap": self.overlap + [None] * len(self.pending)}

    return Timeline


def overlap_of(pts: list, window: int) -> list:
    """A pass's ``overlap`` from the hub's record of the timeline's points
    in counting window ``window`` (from 0): per receive, in the order the
    rank issued them, the matmuls between its issue and the first read of
    its block (None: never read)."""
    mine = [p[0] for p in pts if p[1] == window + 1 and p[2] >= 0]
    out = []
    for k in range(sum(n.startswith(RECV + " ") for n in mine)):
        try:
            at = mine.index(f"{RECV} {k}")
        except ValueError:
            raise ValueError(f"the timeline's receive {k} is missing")
        end = mine.index(f"{READ} {k}") if f"{READ} {k}" in mine else None
        out.append(None if end is None or end < at else
                   mine[at:end].count(MATMUL))
    return out


def from_hub(result, windows):
    """``forward`` and ``backward``'s ops and bytes from the grader's hub
    (``labkit.buildit.counted``), one window each; their ``overlap`` from
    the points the harness's timeline marked at the hub as each receive
    was issued, each matmul ran while a block was pending and each block
    was first read (``labkit.buildit.points``), in the order the hub
    recorded them: rewriting the timeline's list afterwards changes
    nothing graded."""
    from labkit.buildit.counted import summed, windows_of
    from labkit.buildit.points import of_hub
    ranks = []
    for (r, w), pts in zip(windows_of(result, windows, 2), of_hub(result)):
        new = dict(r)
        for k, (phase, win) in enumerate(zip(("forward", "backward"), w)):
            s = summed(win)
            new[phase] = {**r[phase], "ops": sorted(s),
                          "sent": s.get("send", 0),
                          "received": s.get("recv", 0),
                          "overlap": overlap_of(pts, k)}
        ranks.append(new)
    return {**result, "ranks": ranks}


def share(cfg, w, r) -> list:
    """Rank ``r``'s tokens of ``q, k, v, dout`` (``labkit.buildit.dealt``)."""
    from labkit.buildit.dealt import part
    return part(tensors(cfg, w), r, cfg["tokens"], -2)


def rank_run(ctx, mod, cfg) -> dict:
    from labkit.buildit import dealt
    q, k, v, dout = dealt.mine(share(cfg, ctx.world_size, ctx.rank))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    timeline = _timeline()
    with timeline() as fwd:
        out = mod.ring_attention(q, k, v)
    with timeline() as bwd:
        out.backward(dout)
    return {"out": flat(out), "dq": flat(q.grad), "dk": flat(k.grad),
            "dv": flat(v.grad), "forward": fwd.report(),
            "backward": bwd.report()}


# --------------------------------------------------------------------------
# Checks: plain data in, (passed, measured, expected, reason) out
# --------------------------------------------------------------------------

def _worst(result, names):
    cfg, w = result["config"], len(result["ranks"])
    want = dict(zip(("out", "dq", "dk", "dv"), reference(cfg, w)))
    n = cfg["tokens"]
    return max(gap(rank.get(x), want[x][..., r * n:(r + 1) * n, :])
               for r, rank in enumerate(result["ranks"]) for x in names)


def check_output(result):
    worst = _worst(result, ["out"])
    return worst < TOL, worst, f"< {TOL:g}", (
        f"your output differs from one process's attention of the whole "
        f"sequence by up to {worst:.3g}: merging a block into the running "
        "output RESCALES both: with lse' = logaddexp(lse, lse_block), out = "
        "out exp(lse - lse') + out_block exp(lse_block - lse'); every rank "
        "must see all p blocks")


def check_grads(result):
    worst = {x: _worst(result, [x]) for x in ("dq", "dk", "dv")}
    bad = [x for x, v in worst.items() if not v < TOL]
    return not bad, max(worst.values()), f"< {TOL:g}", (
        "these gradients differ from one process's: " + ", ".join(
            f"{x} ({worst[x]:.3g})" for x in bad) + (
            ". Backward needs the forward's final output and lse (delta "
            "and each block's probabilities come from them)"
            if "dq" in bad else
            ". A rank computes dK/dV of every block it sees, but they "
            "belong to the block's owner: send them round the ring with "
            "the block (p hops) and return what comes home"))


def check_bytes(result):
    from labkit.predict.context_parallel import ring_bytes
    cfg, w = result["config"], len(result["ranks"])
    hidden = cfg["heads"] * cfg["head_dim"]
    want = ring_bytes(cfg["batch"], w * cfg["tokens"], hidden, w,
                      elem=4)["send"]["bytes"]
    for r, rank in enumerate(result["ranks"]):
        ops = set(rank["forward"]["ops"]) | set(rank["backward"]["ops"])
        sent = rank["forward"]["sent"] + rank["backward"]["sent"]
        got = rank["forward"]["received"] + rank["backward"]["received"]
        if ops - {"send", "recv", "barrier"} or sent != want \
                or got != want:
            return False, f"rank {r}: {sorted(ops)}, sent {sent} B, " \
                f"received {got} B", f"send/recv {want} B", (
                    f"rank {r} used {sorted(ops) or 'no collective'}, sent "
                    f"{sent} and received {got} bytes; the ring uses only "
                    f"point-to-point messages and each rank sends and "
                    f"receives {want} B: its K/V block p - 1 hops forward "
                    "and p - 1 hops backward, and the travelling dK/dV p "
                    "hops (chapter 11)")
    return True, f"send/recv {want} B", f"send/recv {want} B", ""


def check_overlap(result):
    for r, rank in enumerate(result["ranks"]):
        for phase in ("forward", "backward"):
            gaps = rank[phase]["overlap"]
            hidden = sum(1 for g in gaps if g)
            if not gaps or hidden < len(gaps) - 1:
                return False, f"rank {r} {phase}: {hidden} of {len(gaps)}",\
                    "all receives but one", (
                        f"in {phase}, {len(gaps) - hidden} of the "
                        f"{len(gaps)} blocks rank {r} received were read "
                        "before it computed anything after asking for "
                        "them" if gaps else f"rank {r} received nothing "
                        f"point to point in {phase}") + (
                        ": start the next block's transfer "
                        "(dist.batch_isend_irecv of an isend to rank + 1 "
                        "and an irecv from rank - 1) BEFORE computing on "
                        "the current block, and wait only after")
    return True, "all receives but one overlapped", \
        "all receives but one", ""


def min_wire(cfg, w: int) -> int:
    """Half the bytes the ring's point-to-point messages carry in all."""
    from labkit.predict.context_parallel import ring_bytes
    one = ring_bytes(cfg["batch"], w * cfg["tokens"],
                     cfg["heads"] * cfg["head_dim"], w, elem=4)
    return w * one["send"]["bytes"] // 2


def expected(cfg, world_size: int) -> dict:
    from labkit.predict.context_parallel import ring_bytes
    want = ring_bytes(cfg["batch"], world_size * cfg["tokens"],
                      cfg["heads"] * cfg["head_dim"], world_size, elem=4)
    return {"output": f"max |out - one process| < {TOL:g}",
            "grads": f"dq, dk, dv within {TOL:g} of one process's",
            "bytes": f"send/recv only, {want['send']['bytes']} B each way "
                     "per rank",
            "overlap": "each pass: every received block but one at most "
                       "arrives while the rank computes"}


CHECKS = [("output", 1, check_output), ("grads", 1, check_grads),
          ("bytes", 1, check_bytes), ("overlap", 1, check_overlap)]
