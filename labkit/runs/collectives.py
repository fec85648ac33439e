"""An nccl-tests style sweep: time all-reduce, all-gather, reduce-scatter.

    torchrun --nproc-per-node 2 -m labkit.runs.collectives \
        --ops all_reduce,all_gather,reduce_scatter \
        --min-bytes 1024 --max-bytes 4194304 --factor 4 --iters 10

For every operation and message size S (the logical payload, as in
nccl-tests and ``labkit.predict.collectives``: the tensor of an all-reduce,
the gathered output of an all-gather, the input of a reduce-scatter) each
rank

1. checks the result once with values whose answer is known: an
   all-reduce of ``rank + 1`` gives N(N+1)/2 everywhere; an all-gather of
   ``rank`` gives chunk i = i (rank order); a reduce-scatter whose input
   chunk c holds (rank + 1)(c + 1) gives rank r the value
   (r + 1) N(N+1)/2 -- so the wrong chunk or order cannot pass;
2. runs ``--warmup`` untimed calls, then ``--iters`` calls back to back
   between two barriers (and CUDA synchronisations), and records the mean
   time per call, as nccl-tests does (``-w`` / ``-n``) -- three such
   loops, keeping the fastest, because a shared machine adds spikes that
   are not the collective's.

Last, the run issues one call of each kind of
collective -- through ``torch.distributed`` and through the functional
collectives -- inside a :class:`~labkit.measure.collectives.CollectiveCounter`
and saves what it counted (the tests and the lab hold it to the sizes);
``--counter-check`` does only that.

The notebook takes the slowest rank's time, computes algbw = S / t and
busbw (:func:`labkit.predict.collectives.busbw`) and fits the alpha-beta
model. The dtype is float32 on every backend: bandwidth does not depend on
it, and the checks stay exact.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as tdist

from labkit import device as D
from labkit import dist
from labkit.predict.collectives import message_sizes

OPS = ("all_reduce", "all_gather", "reduce_scatter")
ROUNDS = 3  # timed loops per size; the fastest one is kept


def buffers(op: str, nbytes: int, ctx, check: bool):
    """Input and output tensors of one call; known values when ``check``."""
    n, r = ctx.world_size, ctx.rank
    numel = nbytes // 4
    chunk = numel // n
    dev = ctx.device
    if op == "all_reduce":
        t = torch.full((numel,), float(r + 1), device=dev)
        return t, t
    if op == "all_gather":
        return (torch.full((chunk,), float(r), device=dev),
                torch.empty(chunk * n, device=dev))
    inp = torch.empty(chunk * n, device=dev)
    if check:  # chunk c holds (rank + 1)(c + 1)
        inp.view(n, chunk).copy_(
            (r + 1) * torch.arange(1, n + 1, device=dev,
                                   dtype=torch.float32)[:, None])
    else:
        inp.fill_(1.0)
    return inp, torch.empty(chunk, device=dev)


def call(op: str, inp, out) -> None:
    if op == "all_reduce":
        tdist.all_reduce(inp)
    elif op == "all_gather":
        tdist.all_gather_into_tensor(out, inp)
    else:
        tdist.reduce_scatter_tensor(out, inp)


def correct(op: str, out, ctx) -> bool:
    """Is ``out`` the known answer of the check run?"""
    n, r = ctx.world_size, ctx.rank
    if op == "all_reduce":
        return bool(torch.all(out == n * (n + 1) / 2))
    if op == "all_gather":
        want = torch.arange(n, device=out.device, dtype=out.dtype)
        want = want.repeat_interleave(out.numel() // n)
        return bool(torch.equal(out, want))
    return bool(torch.all(out == (r + 1) * n * (n + 1) / 2))


def sweep(op: str, sizes, ctx, warmup: int, iters: int) -> list[dict]:
    rows = []
    for nbytes in sizes:
        inp, out = buffers(op, nbytes, ctx, check=True)
        call(op, inp, out)
        dist.sync(ctx)
        ok = correct(op, out, ctx)
        inp, out = buffers(op, nbytes, ctx, check=False)
        for _ in range(warmup):
            call(op, inp, out)
        rounds = []
        for _ in range(ROUNDS):
            dist.sync(ctx)
            tdist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                call(op, inp, out)
            dist.sync(ctx)
            rounds.append((time.perf_counter() - t0) / iters)
        tdist.barrier()
        rows.append({"op": op, "bytes": nbytes, "seconds": min(rounds),
                     "rounds": rounds, "correct": ok})
    return rows


def counter_check(ctx) -> tuple[list[dict], list[dict]]:
    """One call of each collective, counted: (expected, records)."""
    import torch.distributed._functional_collectives as funcol
    from labkit.measure.collectives import CollectiveCounter
    n, r, dev = ctx.world_size, ctx.rank, ctx.device
    k = 6  # elements per rank
    x = torch.ones(k * n, device=dev)
    shard = torch.ones(k, device=dev)
    expect = []  # (op, numel) in issue order, logical payloads
    with CollectiveCounter() as counter:
        tdist.all_reduce(x)
        expect.append(("all_reduce", k * n))
        tdist.all_gather_into_tensor(x, shard)
        expect.append(("all_gather", k * n))
        tdist.all_gather([torch.empty(k, device=dev) for _ in range(n)],
                         shard)
        expect.append(("all_gather", k * n))
        tdist.reduce_scatter_tensor(shard, x)
        expect.append(("reduce_scatter", k * n))
        tdist.broadcast(x, src=0)
        expect.append(("broadcast", k * n))
        tdist.all_to_all_single(torch.empty_like(x), x)
        expect.append(("all_to_all", k * n))
        if n == 2:
            if r == 0:
                tdist.send(shard, dst=1)
                expect.append(("send", k))
            else:
                tdist.recv(shard, src=0)
                expect.append(("recv", k))
        tdist.barrier()
        expect.append(("barrier", 0))
        y = funcol.all_reduce(x, "sum", tdist.group.WORLD)
        expect.append(("all_reduce", k * n))
        y = funcol.all_gather_tensor(shard, 0, tdist.group.WORLD)
        expect.append(("all_gather", k * n))
        y = funcol.reduce_scatter_tensor(x, "sum", 0, tdist.group.WORLD)
        expect.append(("reduce_scatter", k * n))
        y.wait() if hasattr(y, "wait") else None
    return [{"op": o, "numel": m, "bytes": 4 * m} for o, m in expect], \
        counter.records


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--min-bytes", type=int, default=1024)
    p.add_argument("--max-bytes", type=int, default=4 << 20)
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--counter-check", action="store_true",
                   help="count one call of each collective and stop")
    a = p.parse_args(argv)
    ops = [o for o in a.ops.split(",") if o]
    bad = [o for o in ops if o not in OPS]
    if bad:
        p.error(f"unknown ops {bad}; choose from {OPS}")
    if a.iters < 1 or a.warmup < 0:
        p.error("--iters must be >= 1 and --warmup >= 0")
    ctx = dist.init()
    if a.counter_check:
        expected, records = counter_check(ctx)
        dist.save(ctx, {"expected": expected, "records": records})
        dist.close()
        return
    sizes = message_sizes(a.min_bytes, a.max_bytes, a.factor,
                          ranks=ctx.world_size, elem_bytes=4)
    rows = [row for op in ops for row in sweep(op, sizes, ctx, a.warmup,
                                                a.iters)]
    expected, records = counter_check(ctx)
    dist.save(ctx, {"rows": rows, "config": vars(a),
                    "counter": {"expected": expected, "records": records},
                    "device": D.name(ctx.device)})
    dist.close()


if __name__ == "__main__":
    main()
