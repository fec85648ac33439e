"""``torch.compile`` per block under FSDP2, against eager, in one launch.

    torchrun --nproc-per-node 2 -m labkit.runs.compile --steps 3 \
        --backend inductor

Each rank builds the same model twice from the seed (``arch.preset``,
default ``llama-tiny``): once eager, once with every block compiled *in
place* before ``fully_shard`` (``block.compile()``, as torchtitan's
``apply_compile`` compiles each ``TransformerBlock`` before FSDP wraps it),
and trains both for ``--steps`` steps of AdamW on the same batches. It
saves:

- ``explain``: ``torch._dynamo.explain`` of one block (graphs, graph
  breaks, their reasons) and of the whole FSDP2 model's forward, where
  FSDP's hooks are;
- ``ops``: the aten operators one block's forward + backward runs eager
  (a ``TorchDispatchMode`` count) and, with ``inductor``, the kernels
  Inductor generated for the compiled blocks (``torch._inductor.metrics``);
- ``losses``: eager and compiled, per step (equal within rounding);
- ``collectives``: one step's c10d operations, eager and compiled
  (:class:`labkit.measure.collectives.CollectiveCounter`);
- ``seconds``: the first (compiling) step and the median of the others,
  on whatever device ran it (a CPU figure on gloo).

- ``cache``: where Inductor kept what it compiled and how many graphs
  came from there (FX graph cache and AOTAutograd cache hits / misses).

Compilation is paid once per graph and kept: ``TORCHINDUCTOR_CACHE_DIR``
defaults to the checkout's ``.cache/inductor`` (set it to an empty
folder to measure a cold start, as ``scripts/benchmark.py`` does), with
the FX graph cache and the AOTAutograd cache on, so a second run loads
the kernels instead of generating and compiling them again.

``--backend aot_eager`` traces and splits the graphs as ``inductor`` does
but generates no code (the tests use it: seconds, not minutes, on CPU).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import Counter

import torch
from pathlib import Path

from torch.utils._python_dispatch import TorchDispatchMode

from labkit import arch, dist
from labkit import device as D
from labkit.measure.collectives import CollectiveCounter
from labkit.nn.model import batch, build_arch
from labkit.training.wrap import wrap


CACHE = Path(__file__).resolve().parents[2] / ".cache" / "inductor"


def use_cache() -> str:
    """Point Inductor's caches at ``.cache/inductor`` unless the caller
    chose a folder; returns the folder. Before the first compile: the
    folder is read when a graph is looked up."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(CACHE))
    os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")
    return os.environ["TORCHINDUCTOR_CACHE_DIR"]


def drop_truncated(folder, older_than_s: float = 60.0) -> list[str]:
    """Delete the compiled kernels (``*.so``) in ``folder`` that are
    shorter than their own ELF header says: what a compile killed midway
    (a launch's timeout) leaves behind. Inductor writes a kernel at its
    final path, so a truncated one would fail every later run that loads
    it ("file too short"); deleted, it is compiled again. Files younger
    than ``older_than_s`` may still be being written: they are kept."""
    import struct
    dropped = []
    for so in Path(folder).rglob("*.so"):
        try:
            st = so.stat()
            if time.time() - st.st_mtime < older_than_s:
                continue
            with open(so, "rb") as f:
                head = f.read(64)
            ok = len(head) == 64 and head[:4] == b"\x7fELF" \
                and head[4] == 2 and head[5] == 1   # 64-bit little-endian
            if ok:
                phoff, shoff = struct.unpack_from("<QQ", head, 0x20)
                phent, phnum, shent, shnum = struct.unpack_from(
                    "<HHHH", head, 0x36)
                ok = st.st_size >= max(phoff + phent * phnum,
                                       shoff + shent * shnum)
            if not ok:
                so.unlink()
                dropped.append(str(so.relative_to(folder)))
        except FileNotFoundError:   # the other rank dropped it first
            continue
    return dropped


def cache_counts() -> dict:
    """Graphs found in / added to Inductor's caches in this process."""
    from torch._dynamo.utils import counters
    fx, aot = counters["inductor"], counters["aot_autograd"]
    return {"fx_hits": fx["fxgraph_cache_hit"],
            "fx_misses": fx["fxgraph_cache_miss"],
            "aot_hits": aot["autograd_cache_hit"],
            "aot_misses": aot["autograd_cache_miss"]}


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))


def block_ops(block, h) -> dict:
    """Aten operators of one eager forward + backward of ``block``."""
    h = h.detach().requires_grad_(True)
    with _Ops() as mode:
        block(h).sum().backward()
    return {"total": sum(mode.ops.values()), "kinds": len(mode.ops)}


def explain(fn, *inputs) -> dict:
    ex = torch._dynamo.explain(fn)(*inputs)
    return {"graphs": ex.graph_count, "graph_breaks": ex.graph_break_count,
            "reasons": sorted({str(b.reason).splitlines()[0][:160]
                               for b in ex.break_reasons})}


def compile_blocks(model, backend, ctx):
    """Compile every block in place, then shard it with FSDP2.

    The order is torchtitan's (``apply_compile`` before ``apply_fsdp``):
    each block becomes one graph, and FSDP2's all-gather before a block
    and reduce-scatter after it run in hooks *outside* the graphs, so
    Dynamo never traces a collective. The blocks share one code object:
    the first is compiled, the others reuse its graph (their parameters
    are the graph's inputs)."""
    for block in model.blocks:
        block.compile(backend=backend)
    return wrap(model, "fsdp2_full", ctx)


def train(model, data, steps, ctx):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses, seconds, comm = [], [], None
    for s in range(steps):
        x, y = data(s)
        dist.sync(ctx)
        t0 = time.perf_counter()
        if s == steps - 1:
            with CollectiveCounter() as c:
                loss = model(x, y)
                loss.backward()
            comm = c.summary()
        else:
            loss = model(x, y)
            loss.backward()
        opt.step()
        opt.zero_grad()
        dist.sync(ctx)
        seconds.append(time.perf_counter() - t0)
        losses.append(loss.item())
    return losses, seconds, comm


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="llama-tiny")
    ap.add_argument("--batch", type=int, default=4, help="per rank")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--backend", default="inductor",
                    choices=("inductor", "aot_eager"))
    a = ap.parse_args(argv)
    if a.steps < 2:
        raise SystemExit("--steps must be >= 2 (the first step compiles)")
    rec = arch.preset(a.preset)
    cache = use_cache()
    dropped = drop_truncated(cache) if Path(cache).is_dir() else []
    ctx = dist.init()
    import types
    shape = types.SimpleNamespace(vocab=rec.vocab, seq=rec.max_seq)

    def data(step):
        x, y = batch(shape, a.batch * ctx.world_size, step)
        mine = slice(ctx.rank * a.batch, (ctx.rank + 1) * a.batch)
        return x[mine].to(ctx.device), y[mine].to(ctx.device)

    out = {"config": vars(a), "device": D.name(ctx.device)}
    probe = build_arch(rec, seed=0).to(ctx.device)
    h = probe.embed(data(0)[0]).detach()
    out["ops"] = {"eager_block": block_ops(probe.blocks[0], h)}
    out["explain"] = {"block": explain(probe.blocks[0], h)}
    eager = wrap(build_arch(rec, seed=0), "fsdp2_full", ctx)
    compiled = compile_blocks(build_arch(rec, seed=0), a.backend, ctx)
    torch._dynamo.reset()                  # explain's traces aside
    from torch._inductor import metrics
    metrics.reset()
    res = {}
    for name, model in (("eager", eager), ("compiled", compiled)):
        losses, secs, comm = train(model, data, a.steps, ctx)
        res[name] = {"losses": losses, "first_step_s": secs[0],
                     "step_s": statistics.median(secs[1:]),
                     "collectives": comm}
    out.update(res)
    out["ops"]["inductor_kernels"] = (metrics.generated_kernel_count
                                      if a.backend == "inductor" else None)
    out["ops"]["blocks"] = rec.layers
    where = Path(cache).resolve()
    if where.is_relative_to(CACHE.parents[1]):   # no local path on a page
        where = where.relative_to(CACHE.parents[1])
    out["cache"] = {"dir": str(where), **cache_counts(),
                    "dropped_truncated": dropped}
    try:   # the whole sharded model traced: where FSDP2's hooks break it
        out["explain"]["fsdp2_model"] = explain(eager, *data(0))
    except Exception as e:  # noqa: BLE001 - the reason is the result
        out["explain"]["fsdp2_model"] = {
            "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    dist.save(ctx, out)
    dist.close()


if __name__ == "__main__":
    main()
