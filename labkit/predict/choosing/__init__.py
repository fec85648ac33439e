"""Plan a parallel layout: a model and a cluster in, ranked layouts out.

    python -m labkit plan --params 70e9 --gpus 8 --gpu a100-80gb --batch 64
    python -m labkit plan --layers 96 --hidden 12288 --heads 96 --seq 2048 \
        --vocab 51200 --batch 1536 --gpus 1024 --gpu a100-80gb --top 5
    python -m labkit plan --layers 70 --hidden 14336 --heads 112 \
        --seq 2048 --vocab 250880 --batch 2048 --gpus 384 --gpu a100-80gb \
        --recompute full --tp 4 --pp 12
    python -m labkit plan --params 175e9 --gpus 256 --gpu h100-80gb \
        --batch 1536 --all --json

Chapter 13 ("Choosing a framework") in one function, :func:`plan`. It
enumerates every layout TP x PP x DP (TP inside a node; any number of
pipeline stages up to the layers, uneven ones split by
:mod:`labkit.predict.pipeline_parallel.partition` or by ``--partition`` /
``--first-stage-layers`` / ``--last-stage-layers``), ZeRO stage of the
data-parallel group (0 = DDP, 3 = FSDP FULL_SHARD), micro-batch, number of
micro-batches, sequence parallelism, activation recomputation and offload,
and prices each with :mod:`labkit.predict.choosing.layout_cost` (memory of the
heaviest stage, time per step) on the machines of
:mod:`labkit.predict.choosing.cluster` and the shapes of
:mod:`labkit.predict.model.shapes`; then tokens/s, MFU (model FLOPs, PaLM
Appendix B) and achieved hardware TFLOP/s per GPU (what Narayanan et al.
2021 report).

A model is a GPT shape (:class:`labkit.predict.model.shapes.Model`) or any
architecture record with a sequence length
(:class:`labkit.predict.model.shapes.ArchModel`, ``--hf-config`` / ``--preset``);
both are priced through the record. Layouts are ranked by predicted step
time; ``--all`` lists the infeasible ones with the reason. The command line
is :mod:`labkit.predict.choosing.plan_cli`.

The folder: ``cluster``, ``layout_cost`` (with ``framework_cost``: a
layout under ``--framework``), ``plan_moe`` and the command line
``plan_cli``. Pure Python.
"""
from __future__ import annotations

from labkit.predict.model import flops as _flops
from labkit.predict.pipeline_parallel import partition as _part
from labkit.predict.pipeline_parallel import stage_bytes as _sb
from labkit.predict.choosing.cluster import (  # noqa: F401
    GB, GPU, GPUS, Cluster)
from labkit.predict.choosing.layout_cost import (  # noqa: F401
    Assumptions, Layout, memory, step_time)
from labkit.predict.model.shapes import (  # noqa: F401
    SHAPES, ArchModel, Model, standard_model)

RECOMPUTE = _flops.RECOMPUTE
OFFLOADS = ("none", "optimizer", "params")
# The work bound: a plan prices every pipeline stage of every layout
# (about 20 us a stage on one core, measured), counted before it starts.
MAX_STAGES_PRICED = 1_000_000


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _layouts(m: Model, batch: int, c: Cluster, recompute, offload, zero,
             sequence_parallel, tp=None, pp=None, micro_batch=None,
             stages=None, context_parallel=(1,)):
    for t in _divisors(min(c.gpus_per_node, c.gpus)):
        if m.heads % t or m.hidden % t or (tp and t != tp):
            continue
        if _sb.split_error(m.arch, t):   # KV heads, FFN width
            continue
        for p, cp in ((p, cp) for p in _divisors(c.gpus // t)
                      for cp in context_parallel):
            if (p > m.layers or (pp and p != pp) or c.gpus % (t * p * cp)
                    or m.seq % (2 * cp)):   # zigzag: 2 cp chunks
                continue
            parts = stages(p)  # even or not (partition.py)
            d = c.gpus // (t * p * cp)
            if batch % d:
                continue
            for b in _divisors(batch // d):
                if micro_batch and b != micro_batch:
                    continue
                for z in zero:
                    if p > 1 and z >= 2:  # Megatron/DeepSpeed: ZeRO-1 w/ PP
                        continue
                    if d * cp == 1 and z > 0:
                        continue
                    for r in recompute:
                        for off in offload:
                            if off != "none" and z == 0:
                                continue
                            if off == "params" and z != 3:
                                continue
                            for sp in sequence_parallel:
                                if sp and t == 1:
                                    continue
                                yield Layout(t, p, d, z, b,
                                             batch // (d * b), r, off, sp,
                                             parts, cp=cp)


def check(m: Model, batch: int, c: Cluster, tp=None, pp=None,
          micro_batch=None) -> None:
    """One clear ValueError for a request no layout can satisfy by shape."""
    for name in ("layers", "hidden", "heads", "seq", "vocab"):
        v = getattr(m, name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    if isinstance(m, Model) and m.hidden % m.heads:
        raise ValueError(f"hidden ({m.hidden}) is not divisible by heads "
                         f"({m.heads})")
    if tp is not None:
        if tp < 1 or m.heads % tp:
            raise ValueError(f"heads ({m.heads}) are not divisible by "
                             f"tp={tp}")
        if _sb.split_error(m.arch, tp):
            raise ValueError(_sb.split_error(m.arch, tp))
        if tp > c.gpus_per_node:
            raise ValueError(f"tp={tp} spans nodes of {c.gpus_per_node} GPUs")
    if pp is not None:
        if pp < 1 or pp > m.layers:
            raise ValueError(f"pp={pp} must be between 1 and the "
                             f"{m.layers} layers")
        if c.gpus % pp:
            raise ValueError(f"{c.gpus} GPUs are not divisible by pp={pp}")
    if tp and pp and c.gpus % (tp * pp):
        raise ValueError(f"{c.gpus} GPUs are not divisible by tp x pp = "
                         f"{tp * pp}")
    if tp and pp:
        d = c.gpus // (tp * pp)
        if batch % (d * (micro_batch or 1)):
            raise ValueError(f"batch {batch} is not divisible by dp x "
                             f"micro-batch = {d} x {micro_batch or 1}")
    elif micro_batch is not None and (micro_batch < 1 or batch % micro_batch):
        raise ValueError(f"batch {batch} is not divisible by micro-batch "
                         f"{micro_batch}")


def plan(m: Model, batch: int, c: Cluster, a: Assumptions | None = None,
         recompute=RECOMPUTE, offload=("none",), zero=(0, 1, 2, 3),
         sequence_parallel=(False, True), tp=None, pp=None,
         micro_batch=None, partition=None, first_stage_layers=None,
         last_stage_layers=None, context_parallel=(1,)) -> list[Layout]:
    """Every layout, priced; feasible ones first, ranked by step time.

    ``partition`` (layers per stage) fixes the pipeline; otherwise each
    depth is split by :func:`labkit.predict.pipeline_parallel.partition.partition`, with
    ``first_stage_layers`` / ``last_stage_layers`` pinning the ends.
    ``context_parallel``: the CP degrees to search (1: none).
    """
    a = a or Assumptions()
    if partition is not None:
        partition = _part.check(partition, m.layers)
        if pp not in (None, len(partition)):
            raise ValueError(f"--partition has {len(partition)} stages, "
                             f"--pp says {pp}")
        pp = len(partition)
    check(m, batch, c, tp, pp, micro_batch)
    for cp in context_parallel:
        if not isinstance(cp, int) or cp < 1 or m.seq % (2 * cp) and cp > 1:
            raise ValueError(f"cp={cp} must be >= 1 and divide the "
                             f"sequence ({m.seq}) in 2 cp chunks")
        if c.gpus % cp:
            raise ValueError(f"{c.gpus} GPUs are not divisible by cp={cp}")
    pinned = first_stage_layers is not None or last_stage_layers is not None
    if pinned and pp is None:
        raise ValueError("--first/last-stage-layers need --pp")
    if pinned and partition is None:  # a clear error before the search
        partition = _part.partition(m.layers, pp, first_stage_layers,
                                    last_stage_layers)

    def stages(p):
        return partition or _part.partition(m.layers, p)
    out = []
    model_flops = m.model_flops(batch)
    peak = _flops.peak_tflops(c.spec.peak) * 1e12
    node_gpus = min(c.gpus, c.gpus_per_node)
    layouts = list(_layouts(m, batch, c, recompute, offload, zero,
                            sequence_parallel, tp, pp, micro_batch, stages,
                            context_parallel))
    work = sum(len(lay.partition) for lay in layouts)
    if work > MAX_STAGES_PRICED:
        raise ValueError(f"this plan would price {work:,} pipeline stages "
                         f"({len(layouts):,} layouts); at most "
                         f"{MAX_STAGES_PRICED:,}: pin --tp, --pp or "
                         "--micro-batch")
    for lay in layouts:
        lay.stage, lay.memory = memory(m, lay, a)
        lay.ledger_total = lay.memory.pop("ledger_total",
                                          lay.memory["total"])
        lay.framework_error = lay.memory.pop("framework_error", "")
        lay.host_memory_per_node = lay.memory["cpu"] * node_gpus
        lay.time = step_time(m, lay, c, a)
        lay.step_s = lay.time["step"]
        lay.tokens_per_s = batch * m.seq / lay.step_s
        lay.mfu = model_flops / (lay.step_s * c.gpus * peak)
        hw = m.hardware_flops(batch, lay.recompute)
        lay.hw_tflops_per_gpu = hw / (lay.step_s * c.gpus) / 1e12
        short = lay.memory["total"] - c.spec.memory
        if lay.framework_error:
            lay.feasible = False
            lay.reason = lay.framework_error
        elif short > 0:
            lay.feasible = False
            lay.reason = (f"needs {lay.memory['total'] / GB:.1f} GB per GPU,"
                          f" {short / GB:.1f} GB more than the "
                          f"{c.spec.memory / GB:.0f} GB of a {c.gpu}")
            if lay.ledger_total <= c.spec.memory:
                lay.reason += (f"; the ledger with --reserve-gb fits "
                               f"({lay.ledger_total / GB:.1f} GB), not "
                               f"{a.framework}'s terms and the floor")
        elif lay.host_memory_per_node > c.host_memory_gb * GB:
            lay.feasible = False
            lay.reason = (f"offload needs {lay.host_memory_per_node / GB:.0f}"
                          f" GB of host memory per node, more than "
                          f"{c.host_memory_gb:.0f} GB")
        out.append(lay)
    if not out:
        raise ValueError("no layout divides this model, batch and cluster")
    out.sort(key=lambda x: (not x.feasible, x.step_s if x.feasible
                            else x.memory["total"]))
    return out


def shortfall(layouts: list[Layout]) -> str:
    """What is short when nothing fits: the closest layout and its gap."""
    runs = [x for x in layouts if not x.framework_error] or layouts
    best = min(runs, key=lambda x: x.memory["total"])
    return f"no layout fits; the closest, {best.name()}, {best.reason}"
