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
:mod:`labkit.predict.partition` or by ``--partition`` /
``--first-stage-layers`` / ``--last-stage-layers``), ZeRO stage of the
data-parallel group (0 = DDP, 3 = FSDP FULL_SHARD), micro-batch, number of
micro-batches, sequence parallelism, activation recomputation and offload,
and prices each with :mod:`labkit.predict.layout_cost` (memory of the
heaviest stage, time per step) on the machines of
:mod:`labkit.predict.cluster` and the shapes of
:mod:`labkit.predict.shapes`; then tokens/s, MFU (model FLOPs, PaLM
Appendix B) and achieved hardware TFLOP/s per GPU (what Narayanan et al.
2021 report).

Layouts are ranked by predicted step time; ``--all`` lists the infeasible
ones with the reason. Bad input: one line, exit 2; nothing fits: what is
short, exit 1.
"""
from __future__ import annotations

import json
import sys
from dataclasses import asdict

from labkit.predict import collectives as _coll
from labkit.predict import flops as _flops
from labkit.predict import memory as _memory
from labkit.predict import partition as _part
from labkit.predict.cluster import GB, GPU, GPUS, Cluster  # noqa: F401
from labkit.predict.layout_cost import (Assumptions, Layout,  # noqa: F401
                                        memory, step_time)
from labkit.predict.shapes import SHAPES, Model, standard_model  # noqa: F401

RECOMPUTE = _flops.RECOMPUTE
OFFLOADS = ("none", "optimizer", "params")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _layouts(m: Model, batch: int, c: Cluster, recompute, offload, zero,
             sequence_parallel, tp=None, pp=None, micro_batch=None,
             stages=None, context_parallel=(1,)):
    for t in _divisors(min(c.gpus_per_node, c.gpus)):
        if m.heads % t or m.hidden % t or (tp and t != tp):
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
    if m.hidden % m.heads:
        raise ValueError(f"hidden ({m.hidden}) is not divisible by heads "
                         f"({m.heads})")
    if tp is not None:
        if tp < 1 or m.heads % tp:
            raise ValueError(f"heads ({m.heads}) are not divisible by "
                             f"tp={tp}")
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
    depth is split by :func:`labkit.predict.partition.partition`, with
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
    model_flops = _flops.model_flops(batch, m.seq, m.layers, m.hidden,
                                     m.vocab)
    peak = _flops.peak_tflops(c.spec.peak) * 1e12
    node_gpus = min(c.gpus, c.gpus_per_node)
    for lay in _layouts(m, batch, c, recompute, offload, zero,
                        sequence_parallel, tp, pp, micro_batch, stages,
                        context_parallel):
        lay.stage, lay.memory = memory(m, lay, a)
        lay.host_memory_per_node = lay.memory["cpu"] * node_gpus
        lay.time = step_time(m, lay, c, a)
        lay.step_s = lay.time["step"]
        lay.tokens_per_s = batch * m.seq / lay.step_s
        lay.mfu = model_flops / (lay.step_s * c.gpus * peak)
        hw = _flops.hardware_flops(batch, m.seq, m.layers, m.hidden,
                                   m.vocab, lay.recompute)
        lay.hw_tflops_per_gpu = hw / (lay.step_s * c.gpus) / 1e12
        short = lay.memory["total"] - c.spec.memory
        if short > 0:
            lay.feasible = False
            lay.reason = (f"needs {lay.memory['total'] / GB:.1f} GB per GPU,"
                          f" {short / GB:.1f} GB more than the "
                          f"{c.spec.memory / GB:.0f} GB of a {c.gpu}")
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
    best = min(layouts, key=lambda x: x.memory["total"])
    return f"no layout fits; the closest, {best.name()}, {best.reason}"


# -- command line -------------------------------------------------------------

def add_arguments(p) -> None:
    g = p.add_argument_group("model (a shape, or --params for a standard one)")
    for k in ("layers", "hidden", "heads", "seq", "vocab"):
        g.add_argument(f"--{k}", type=int)
    g.add_argument("--params", type=float,
                   help="e.g. 70e9: the standard shape of that size")
    from labkit.predict import plan_moe   # mixture of experts: EP layouts
    plan_moe.add_arguments(g)
    p.add_argument("--batch", type=int, required=True,
                   help="global batch in sequences per step")
    p.add_argument("--gpus", type=int, required=True)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--gpu", default="a100-80gb",
                   help=f"GPU preset: {', '.join(GPUS)}")
    links = ", ".join(_coll.LINKS)
    p.add_argument("--intra-link", help=f"inside a node ({links})")
    p.add_argument("--inter-link", help="between nodes")
    p.add_argument("--host-link", help="GPU to host memory (offload)")
    p.add_argument("--host-mem-gb", type=float,
                   help="CPU memory per node (default: the preset's DGX)")
    p.add_argument("--precision", choices=_memory.PRECISIONS,
                   default="mixed")
    p.add_argument("--optimizer", choices=_memory.OPTIMIZERS, default="adam")
    p.add_argument("--recompute", choices=RECOMPUTE + ("any",),
                   default="any")
    p.add_argument("--allow-offload", action="store_true",
                   help="also consider optimizer and parameter offload")
    p.add_argument("--tp", type=int)
    p.add_argument("--pp", type=int)
    p.add_argument("--micro-batch", type=int)
    p.add_argument("--cp", type=int,
                   help="context-parallel ranks (ring attention over the "
                   "sequence); default 1 (none), searched with --hf-config")
    p.add_argument("--partition", type=_part.parse,
                   help="layers per pipeline stage, e.g. 5,6,6,5 (sets pp)")
    p.add_argument("--first-stage-layers", type=int,
                   help="layers on the first stage (Megatron-LM's "
                   "--decoder-first-pipeline-num-layers)")
    p.add_argument("--last-stage-layers", type=int,
                   help="layers on the last stage")
    p.add_argument("--efficiency", type=float, default=0.5,
                   help="matmul FLOP/s as a share of the dense peak")
    p.add_argument("--link-efficiency", type=float, default=0.8)
    p.add_argument("--reserve-gb", type=float, default=2.0)
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--all", action="store_true",
                   help="also list the infeasible layouts and why")
    p.add_argument("--json", action="store_true")


def model_from_args(args) -> Model:
    shape = [getattr(args, k) for k in ("layers", "hidden", "heads", "seq",
                                        "vocab")]
    if args.params is not None:
        if any(v is not None for v in shape):
            raise ValueError("give --params or the shape, not both")
        return standard_model(args.params)
    if any(v is None for v in shape):
        raise ValueError("give --layers --hidden --heads --seq --vocab, "
                         "or --params")
    return Model(*shape)


def main(args) -> int:
    if getattr(args, "hf_config", None):
        from labkit.predict import plan_moe
        return plan_moe.main(args)
    m = model_from_args(args)
    c = Cluster(args.gpus, args.gpus_per_node, args.gpu, args.intra_link,
                args.inter_link, args.host_link, args.host_mem_gb)
    for name in ("efficiency", "link_efficiency"):
        if not 0 < getattr(args, name) <= 1:
            raise ValueError(f"--{name.replace('_', '-')} must be in (0, 1]")
    if args.reserve_gb < 0 or args.top < 1:
        raise ValueError("--reserve-gb must be >= 0 and --top >= 1")
    a = Assumptions(args.efficiency, args.link_efficiency, args.reserve_gb,
                    precision=args.precision, optimizer=args.optimizer)
    rec = RECOMPUTE if args.recompute == "any" else (args.recompute,)
    off = OFFLOADS if args.allow_offload else ("none",)
    lays = plan(m, args.batch, c, a, rec, off, tp=args.tp, pp=args.pp,
                micro_batch=args.micro_batch, partition=args.partition,
                first_stage_layers=args.first_stage_layers,
                last_stage_layers=args.last_stage_layers,
                context_parallel=(args.cp or 1,))
    ok = [x for x in lays if x.feasible]
    shown = ok[:args.top] + ([x for x in lays if not x.feasible]
                             if args.all else [])
    if args.json:
        print(json.dumps({"model": asdict(m), "params": m.params,
                          "cluster": asdict(c), "assumptions": asdict(a),
                          "feasible": len(ok), "layouts": [
                              {**asdict(x), "name": x.name()}
                              for x in shown]}, indent=1))
    else:
        print(f"{m.params / 1e9:.1f} B parameters, batch {args.batch} x "
              f"{m.seq} tokens, {c.gpus} x {c.gpu} ({c.intra} / {c.inter}),"
              f" {len(ok)} of {len(lays)} layouts fit")
        print(f"{'layout':60s} {'GB/GPU':>7s} {'step s':>8s} {'tok/s':>10s}"
              f" {'MFU':>6s} {'TFLOP/s':>8s}")
        for x in shown:
            line = (f"{x.name():60s} {x.memory['total'] / GB:7.1f} "
                    f"{x.step_s:8.3g} {x.tokens_per_s:10.4g} {x.mfu:6.1%} "
                    f"{x.hw_tflops_per_gpu:8.1f}")
            if x.offload != "none":
                line += f"  host {x.host_memory_per_node / GB:.0f} GB/node"
            print(line + ("" if x.feasible else f"  NO: {x.reason}"))
        print(f"assumed: matmuls at {a.efficiency:.0%} of "
              f"{_flops.peak_tflops(c.spec.peak):g} TFLOP/s, links at "
              f"{a.link_efficiency:.0%} of peak, {a.reserve_gb:g} GB "
              "reserved per GPU, 1F1B; DP overlapped without PP, exposed "
              "with PP")
    if not ok:
        print(shortfall(lays), file=sys.stderr)
        return 1
    return 0
