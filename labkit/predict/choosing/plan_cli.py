"""``labkit plan``: the command line of the layout planner
(:func:`labkit.predict.choosing.plan`).

    python -m labkit plan --params 70e9 --gpus 8 --gpu a100-80gb --batch 64
    python -m labkit plan --hf-config llama3.1-405b.json --seq 8192 \
        --gpus 16384 --gpu h100-80gb --batch 2048 --tp 8 --pp 16
    python -m labkit plan --preset llama3-70b --seq 8192 --gpus 64 \
        --gpu h100-80gb --batch 512

``--framework deepspeed|fsdp2|fsdp1|megatron`` prices every layout with
that framework's own terms and the runtime floor instead of the flat
``--reserve-gb`` (:mod:`labkit.predict.choosing.framework_cost`): the fit
test and GB/GPU use them, a headroom column shows what is left, and a
layout the ledger alone would fit says so; a mixture of experts' layouts
too, with what each framework allocates for the experts
(:func:`labkit.predict.choosing.framework_cost.moe_terms`).

A model is a GPT shape (``--layers --hidden --heads --seq --vocab``, or
``--params`` for a standard one) or an architecture record
(``--hf-config`` / ``--preset``, with ``--seq``, default 4096): a dense
record is priced by :mod:`labkit.predict.choosing.layout_cost` with its own GQA,
MLP and vocabulary, a mixture of experts by
:mod:`labkit.predict.choosing.plan_moe`. ``--json`` lists, for every layout, the
heaviest stage's bytes (``memory``) and every stage's (``stages``: its
layers, parameters and bytes per GPU;
:func:`labkit.predict.choosing.layout_cost.stage_report`). Bad input: one line,
exit 2; nothing fits: what is short, exit 1.
"""
from __future__ import annotations

import json
import sys
from dataclasses import asdict

from labkit.predict import collectives as _coll
from labkit.predict.model import flops as _flops
from labkit.predict import memory as _memory
from labkit.predict.pipeline_parallel import partition as _part
from labkit.predict.choosing import (GB, GPUS, OFFLOADS, RECOMPUTE,
                                     Assumptions, ArchModel, Cluster, Model,
                                     plan, shortfall, standard_model)
from labkit.predict.choosing.layout_cost import stage_report

DEFAULT_SEQ = 4096   # with --hf-config / --preset, as the MoE planner's


def add_arguments(p) -> None:
    g = p.add_argument_group("model (a shape, --params for a standard one, "
                             "or --hf-config / --preset)")
    for k in ("layers", "hidden", "heads", "seq", "vocab"):
        g.add_argument(f"--{k}", type=int)
    g.add_argument("--params", type=float,
                   help="e.g. 70e9: the standard shape of that size")
    from labkit.predict.choosing import (  # mixture of experts: EP layouts
        plan_moe)
    plan_moe.add_arguments(g)
    from labkit.predict.model.arch import PRESETS
    g.add_argument("--preset", choices=list(PRESETS),
                   help="a named architecture (labkit.predict.model.arch)")
    p.add_argument("--batch", type=int, required=True,
                   help="global batch in sequences per step")
    p.add_argument("--gpus", type=int, required=True)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--gpu", default="a100-80gb",
                   help=f"GPU preset: {', '.join(GPUS)}; also "
                   "h800-80gb for a mixture of experts (--hf-config)")
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
                   "sequence); default 1 (none) for a dense model, "
                   "searched for a mixture of experts")
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
    p.add_argument("--reserve-gb", type=float, default=2.0,
                   help="flat GB per GPU for CUDA, NCCL and fragmentation "
                   "(with --framework: the runtime floor instead)")
    from labkit.predict.choosing.framework_cost import FRAMEWORKS
    p.add_argument("--framework", choices=FRAMEWORKS, default="ledger",
                   help="price each layout with this framework's own "
                   "terms and the runtime floor (labkit memory "
                   "--framework): the fit test and GB/GPU use them")
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--all", action="store_true",
                   help="also list the infeasible layouts and why")
    p.add_argument("--json", action="store_true")


def record_from_args(args):
    """The record of ``--hf-config`` / ``--preset`` (None: neither)."""
    from labkit.predict.model import arch as A
    if args.hf_config and args.preset:
        raise ValueError("give --hf-config or --preset, not both")
    if args.hf_config:
        return A.from_hf_config(args.hf_config)
    if args.preset:
        return A.preset(args.preset)
    return None


def model_from_args(args, rec=None):
    shape = [getattr(args, k) for k in ("layers", "hidden", "heads", "seq",
                                        "vocab")]
    if rec is not None:
        if args.params is not None or any(v is not None for i, v in
                                          enumerate(shape) if i != 3):
            raise ValueError("give --hf-config/--preset or the shape "
                             "(--layers ... / --params), not both")
        if args.ep is not None:
            raise ValueError("--ep needs a mixture of experts; this "
                             "config is dense")
        return ArchModel(rec, args.seq or DEFAULT_SEQ)
    if args.ep is not None:
        raise ValueError("--ep needs --hf-config of a mixture of experts")
    if args.params is not None:
        if any(v is not None for v in shape):
            raise ValueError("give --params or the shape, not both")
        return standard_model(args.params)
    if any(v is None for v in shape):
        raise ValueError("give --layers --hidden --heads --seq --vocab, "
                         "--params, --hf-config or --preset")
    return Model(*shape)


def main(args) -> int:
    rec = record_from_args(args)
    if rec is not None and rec.experts:
        from labkit.predict.choosing import plan_moe
        return plan_moe.main(args, rec)
    m = model_from_args(args, rec)
    c = Cluster(args.gpus, args.gpus_per_node, args.gpu, args.intra_link,
                args.inter_link, args.host_link, args.host_mem_gb)
    for name in ("efficiency", "link_efficiency"):
        if not 0 < getattr(args, name) <= 1:
            raise ValueError(f"--{name.replace('_', '-')} must be in (0, 1]")
    if args.reserve_gb < 0 or args.top < 1:
        raise ValueError("--reserve-gb must be >= 0 and --top >= 1")
    a = Assumptions(args.efficiency, args.link_efficiency, args.reserve_gb,
                    precision=args.precision, optimizer=args.optimizer,
                    framework=args.framework,
                    gpus_per_node=args.gpus_per_node)
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
        model = (asdict(m) if isinstance(m, Model) else
                 {"arch": m.arch.as_dict(), "seq": m.seq})
        print(json.dumps({"model": model, "params": m.params,
                          "cluster": asdict(c), "assumptions": asdict(a),
                          "feasible": len(ok), "layouts": [
                              {**asdict(x), "name": x.name(),
                               "stages": stage_report(m, x, a)}
                              for x in shown]}, indent=1))
    else:
        name = f"{m.arch.name}: " if isinstance(m, ArchModel) else ""
        print(f"{name}{m.params / 1e9:.1f} B parameters, batch {args.batch} x "
              f"{m.seq} tokens, {c.gpus} x {c.gpu} ({c.intra} / {c.inter}),"
              f" {len(ok)} of {len(lays)} layouts fit")
        real = a.framework != "ledger"
        print(f"{'layout':60s} {'GB/GPU':>7s}"
              + (f" {'headroom':>8s}" if real else "")
              + f" {'step s':>8s} {'tok/s':>10s} {'MFU':>6s} {'TFLOP/s':>8s}")
        for x in shown:
            room = (c.spec.memory - x.memory["total"]) / GB
            line = (f"{x.name():60s} {x.memory['total'] / GB:7.1f} "
                    + (f"{room:8.1f} " if real else "")
                    + f"{x.step_s:8.3g} {x.tokens_per_s:10.4g} {x.mfu:6.1%} "
                    f"{x.hw_tflops_per_gpu:8.1f}")
            if x.offload != "none":
                line += f"  host {x.host_memory_per_node / GB:.0f} GB/node"
            print(line + ("" if x.feasible else f"  NO: {x.reason}"))
        held = (f"{a.framework}'s terms and the runtime floor (CUDA "
                "context, NCCL buffers, cuBLAS, allocator slack) per GPU, "
                "headroom = GB of the GPU less GB/GPU" if real else
                f"{a.reserve_gb:g} GB reserved per GPU")
        print(f"assumed: matmuls at most at {a.efficiency:.0%} of "
              f"{_flops.peak_tflops(c.spec.peak):g} TFLOP/s (less below "
              "the roofline's ridge), links at "
              f"{a.link_efficiency:.0%} of peak, {held}, 1F1B; DP "
              "overlapped without PP, exposed with PP")
    if not ok:
        print(shortfall(lays), file=sys.stderr)
        return 1
    return 0
