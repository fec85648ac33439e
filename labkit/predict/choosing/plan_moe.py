"""Layouts for a mixture of experts: PP x DP with EP inside DP (and TP
optional), per-GPU model states, and the all-to-all priced on the link it
crosses (pure Python; ``labkit plan --hf-config`` comes here when the
record has experts).

    python -m labkit plan --hf-config deepseek-v3.json --gpus 2048 \
        --gpu h800-80gb --batch 15360 --seq 4096 --pp 16 --ep 64
    python -m labkit plan --hf-config mixtral-8x7b.json --gpus 8 \
        --gpu h100-80gb --batch 64 --seq 4096

A layout is ``tp x cp x pp x dp = W`` with the experts sharded over
``ep`` ranks of the ``dp x cp`` ranks (``ep | dp cp``: a token is a token
to the router, whichever sequence part it is; Megatron-Core's MoE
"parallel folding"), as in DeepSeek-V3 (Liu et al. 2024, Sec. 3.2: PP16,
EP64 over 8 nodes, ZeRO-1 DP, no TP, no CP, 2,048 H800). TP, CP, PP and
EP are searched unless given.
Per GPU, for the heaviest pipeline stage (``ceil(L / pp)`` layers, each
counted with the larger of a dense layer's and a MoE layer's non-expert
weights, plus the larger of the embedding and the output layer):

- non-expert weights ``D / tp``, replicated ``dp cp`` times: ZeRO-1
  shards their fp32 master copy and Adam moments over ``dp cp`` (as
  Megatron-LM's distributed optimizer does);
- routed experts ``E / ep`` per MoE layer (``/ tp``), replicated
  ``dp cp / ep`` times: their optimizer states shard over those only;
- bytes: bf16 weights and gradients (4 per parameter) plus 12 per
  parameter of fp32 master and Adam moments divided by the replicas
  (Rajbhandari et al. 2020, Sec. 3.1, stage 1);
- activations with full recomputation: ``2 (s / cp) b h`` bytes per layer
  per micro-batch in flight (Korthikanti et al. 2022, Sec. 5), ``pp``
  micro-batches on the first stage of 1F1B, plus one layer's dispatch
  buffers for its ``s b / cp`` tokens and, with CP, ring attention's K/V
  block in use and the next (``2 x 2 b (s / cp) kv_dim`` bf16).

With CP each rank routes ``s b / cp`` tokens, so the all-to-all shrinks
by ``cp``; ring attention adds its point-to-point K/V traffic
(:func:`labkit.predict.context_parallel.ring`: ``3 cp - 2`` K/V blocks
per layer and micro-batch, forward and backward) on the link the CP
group spans (the ranks after TP, inside a node when ``cp`` fits).

The all-to-all of a MoE layer sends ``k T h (ep - 1) / ep`` values per
rank per direction (:func:`labkit.predict.experts.uniform_bytes`), four
times per micro-batch (dispatch and combine, forward and backward), over
NVLink when the EP group fits in a node and over InfiniBand when not.

``--framework deepspeed|fsdp2|fsdp1|megatron`` prices each layout with
what that framework allocates for the experts and the rest, and the
runtime floor with the all-to-all's buffers, instead of the flat
``--reserve-gb`` (:func:`labkit.predict.choosing.framework_cost
.moe_price`): GB/GPU, a headroom column, and a layout the ledger alone
would fit says so.

``--json`` adds each shown layout's ``stages``: every pipeline stage's
own layers, parameters and bytes per GPU
(:mod:`labkit.predict.pipeline_parallel.stage_bytes_moe`).
"""
from __future__ import annotations

import math

from labkit.predict import collectives as _coll
from labkit.predict import context_parallel as CP
from labkit.predict import experts as X
from labkit.predict.model import params as P
from labkit.predict import roofline as R
from labkit.predict.model.params_moe import moe_counts
from labkit.predict.choosing.framework_cost import (ZERO_NAMES, moe_price,
                                                    moe_zero)

GB = 1e9
# H800: the H100 with NVLink cut to 400 GB/s both directions; DeepSeek-V3
# Sec. 3.2.2: "NVLink 160 GB/s" achieved, IB 50 GB/s (400 Gb/s) per GPU
EXTRA_GPUS = {"h800-80gb": dict(memory=80 * GB, peak=989.4,
                                intra=160e9, inter=50e9,
                                hbm=R.chip("h800")[1])}


def gpu_spec(name: str) -> dict:
    if name in EXTRA_GPUS:
        return EXTRA_GPUS[name]
    from labkit.predict.choosing.cluster import GPUS
    from labkit.predict.model.flops import peak_tflops
    if name not in GPUS:
        raise ValueError(f"unknown GPU preset {name!r}: choose from "
                         f"{', '.join([*GPUS, *EXTRA_GPUS])}")
    g = GPUS[name]
    chip = g.peak.split("-")[0]        # "h100-sxm" -> the data sheet's
    return dict(memory=g.memory, peak=peak_tflops(g.peak),
                intra=_coll.get_link(g.intra).bandwidth,
                inter=_coll.get_link(g.inter).bandwidth,
                hbm=R.CHIPS[chip][1] if chip in R.CHIPS else None)


def expert_compute(a, tokens, ep, tp, pp, microbatches, spec,
                   efficiency) -> float:
    """Seconds of one GPU's routed-expert GEMMs per step, each priced on
    the roofline (:func:`labkit.predict.roofline.expert_time`, the roof
    at ``efficiency`` of the peak, the slope at the data sheet's HBM
    bandwidth): a rank's ``experts / ep`` experts each get ``tokens k ep
    / experts`` tokens per micro-batch (a uniform router), so few tokens
    per expert make them memory-bound (DeepSeek-V3's EP1: ~128)."""
    per_expert = tokens * a.top_k * ep / a.experts
    one = R.expert_time(per_expert, a.hidden, a.expert_ffn / tp,
                        spec["peak"] * 1e12 * efficiency, spec["hbm"])
    return one["seconds"] * (a.experts // ep) * (a.moe_layers / pp) \
        * microbatches


def _divisors(n: int) -> list:
    return [d for d in range(1, n + 1) if n % d == 0]


def parts(a) -> dict:
    """Weights of one layer's non-expert part, one expert, the ends."""
    per = {}
    for i in (0, a.layers - 1):
        ts = P.layer_tensors(a, i)
        per[i] = sum(P.numel(s) for n, s, _ in ts if ".mlp.experts." not in n)
    ends = max(a.vocab * a.hidden, 0)
    return {"layer": max(per.values()), "expert": moe_counts(a)["expert"],
            "ends": ends}


def layout(a, tp, pp, dp, ep, seq, micro_batch, gpus_per_node, spec,
           global_batch, efficiency=0.5, reserve_gb=2.0, cp=1,
           roofline=False, framework="ledger") -> dict:
    w = parts(a)
    layers = math.ceil(a.layers / pp)
    moe_layers = min(layers, a.moe_layers)
    reps = dp * cp               # replicas of the non-expert weights
    dense = (layers * w["layer"] + w["ends"]) / tp
    experts = moe_layers * (a.experts // ep) * w["expert"] / tp
    z = moe_zero(framework, pp)   # FSDP shards weights and grads too
    states = sum(n * ((2 if z < 3 else 2 / r) + (2 if z < 2 else 2 / r)
                      + 12 / r) for n, r in ((dense, reps),
                                             (experts, reps // ep)))
    s = seq // cp                # this rank's part of every sequence
    act = layers * pp * 2 * s * micro_batch * a.hidden
    kv = 2 * micro_batch * s * a.kv_dim * 2         # one K/V block, bf16
    ring_act = 2 * kv if cp > 1 else 0              # in use + the next
    tokens = s * micro_batch
    dispatch = 2 * a.top_k * tokens * a.hidden * 2        # send + recv
    total = states + act + ring_act + dispatch
    microbatches = global_batch // (dp * micro_batch)
    a2a = (4 * X.uniform_bytes(a.top_k, tokens, a.hidden, ep, elt=2)
           * moe_layers * microbatches)
    ring = (CP.ring(a, micro_batch, seq, cp)["send"]["bytes"] * layers
            * microbatches if cp > 1 else 0)
    ranks_per_node = gpus_per_node // tp
    link = "nvlink" if ep <= ranks_per_node else "infiniband"
    bw = spec["intra"] if link == "nvlink" else spec["inter"]
    cp_link = "nvlink" if cp <= ranks_per_node else "infiniband"
    cp_bw = spec["intra"] if cp_link == "nvlink" else spec["inter"]
    active = P.count(a)["active"]
    step_tokens = global_batch * seq
    rate = spec["peak"] * 1e12 * efficiency
    if roofline and spec.get("hbm"):   # the experts' GEMMs by intensity
        routed = a.top_k * w["expert"] * a.moe_layers
        compute = 6 * (active - routed) * step_tokens / (
            tp * cp * pp * dp) / rate + expert_compute(
            a, tokens, ep, tp, pp, microbatches, spec, efficiency)
    else:
        compute = 6 * active * step_tokens / (tp * cp * pp * dp) / rate
    fits = total <= spec["memory"] - reserve_gb * GB
    reason = "" if fits else (f"{total / GB:.1f} GB > "
                              f"{spec['memory'] / GB:.0f} GB - "
                              f"{reserve_gb:g} GB reserved")
    real = {}
    if framework != "ledger":   # its own terms and the floor, not reserve
        unit = max(w["layer"], w["ends"],
                   (a.experts // ep) * w["expert"] * bool(moe_layers)) / tp
        real = moe_price(framework, dense=dense, experts=experts,
                         unit=unit, reps=reps, ep=ep, zero=z,
                         gpus=tp * cp * pp * dp,
                         allocated=total, memory=spec["memory"],
                         reserve=reserve_gb * GB)
        fits, reason = real.pop("fits"), real.pop("reason")
    name = (f"TP{tp} x CP{cp} x PP{pp} x DP{dp} (EP{ep} in DPxCP)"
            if cp > 1 else f"TP{tp} x PP{pp} x DP{dp} (EP{ep} inside DP)")
    return {"tp": tp, "cp": cp, "pp": pp, "dp": dp, "ep": ep,
            "name": f"{name}, {ZERO_NAMES[z]}", "zero": z,
            "states_gb": states / GB, "activations_gb": (act + ring_act)
            / GB, "dispatch_gb": dispatch / GB, "total_gb": total / GB,
            "experts_per_gpu": a.experts // ep,
            "a2a_link": link, "a2a_gb_per_step": a2a / GB,
            "a2a_s": a2a / bw, "ring_link": cp_link if cp > 1 else "",
            "ring_gb_per_step": ring / GB, "ring_s": ring / cp_bw,
            "compute_s": compute, "fits": fits, "reason": reason, **real}


def plan(a, gpus, gpus_per_node, gpu, global_batch, seq, micro_batch=1,
         tp=None, pp=None, ep=None, efficiency=0.5, reserve_gb=2.0,
         cp=None, roofline=False, framework="ledger"):
    """Every layout ``tp x cp x pp x dp = gpus`` with ``ep | dp x cp``
    (``None``: searched), feasible ones first, then by a2a + ring +
    compute seconds."""
    if not a.experts:
        raise ValueError("this config has no experts: labkit plan prices "
                         "a dense one with labkit.predict.choosing.layout_cost")
    spec = gpu_spec(gpu)
    out = []
    for t in ([tp] if tp else _divisors(min(gpus, gpus_per_node))):
        if a.heads % t or gpus % t:
            continue
        for c in ([cp] if cp else _divisors(gpus // t)):
            if seq % c or (gpus // t) % c:
                continue
            for p in ([pp] if pp else _divisors(gpus // (t * c))):
                if p > a.layers or (gpus // (t * c)) % p:
                    continue
                d = gpus // (t * c * p)
                if global_batch % (d * micro_batch):
                    continue
                for e in ([ep] if ep else _divisors(d * c)):
                    if (d * c) % e or a.experts % e:
                        continue
                    out.append(layout(a, t, p, d, e, seq, micro_batch,
                                      gpus_per_node, spec, global_batch,
                                      efficiency, reserve_gb, c,
                                      roofline, framework))
    out.sort(key=lambda x: (not x["fits"], x["a2a_s"] + x["ring_s"]
                            + x["compute_s"]))
    return out


def add_arguments(g) -> None:
    """The flags ``labkit plan`` adds for a mixture of experts."""
    g.add_argument("--hf-config", metavar="PATH",
                   help="a model's config.json (mixtral, qwen2_moe, "
                   "qwen3_moe, deepseek_v3): EP layouts")
    g.add_argument("--ep", type=int, help="expert-parallel ranks (with "
                   "--hf-config)")
    g.add_argument("--roofline", action="store_true", help="price the "
                   "experts' GEMMs on the roofline by their tokens per "
                   "expert (labkit.predict.roofline), not all at "
                   "--efficiency")


def main(args, a=None) -> int:
    import json
    import sys

    from labkit.predict.model import arch
    a = a if a is not None else arch.from_hf_config(args.hf_config)
    seq = args.seq or 4096
    fw = getattr(args, "framework", "ledger")
    real = fw != "ledger"
    lays = plan(a, args.gpus, args.gpus_per_node, args.gpu, args.batch,
                seq, args.micro_batch or 1, args.tp, args.pp, args.ep,
                args.efficiency, args.reserve_gb, getattr(args, "cp", None),
                getattr(args, "roofline", False), fw)
    if not lays:
        raise ValueError("no layout divides these GPUs, batch and experts")
    ok = [x for x in lays if x["fits"]]
    shown = ok[:args.top] + ([x for x in lays if not x["fits"]]
                             if args.all else [])
    c = P.count(a)
    if args.json:   # every stage's own bytes (pipeline_parallel)
        from labkit.predict.pipeline_parallel.stage_bytes_moe import (
            stage_report)
        for x in shown:
            x["stages"] = stage_report(a, x, seq, args.micro_batch or 1,
                                       args.batch)
        print(json.dumps({"arch": a.as_dict(), "total": c["total"],
                          "active": c["active"], "feasible": len(ok),
                          "layouts": shown}, indent=1))
    else:
        print(f"{a.name}: {c['total'] / 1e9:.1f} B parameters, "
              f"{c['active'] / 1e9:.1f} B active; {a.experts} experts, "
              f"top-{a.top_k}; batch {args.batch} x {seq} tokens on "
              f"{args.gpus} x {args.gpu}: {len(ok)} of {len(lays)} "
              "layouts fit")
        print(f"{'layout':51s} {'GB/GPU':>7s}"
              + (f" {'headroom':>8s}" if real else "")
              + f" {'states':>7s} {'experts':>7s} {'a2a link':>10s} "
              f"{'a2a s':>7s} {'ring s':>7s} {'compute s':>9s}")
        for x in shown:
            print(f"{x['name']:51s} "
                  f"{x['need_gb'] if real else x['total_gb']:7.1f} "
                  + (f"{x['headroom_gb']:8.1f} " if real else "")
                  + f"{x['states_gb']:7.1f} {x['experts_per_gpu']:7d} "
                  f"{x['a2a_link']:>10s} {x['a2a_s']:7.2f} "
                  f"{x['ring_s']:7.2f} {x['compute_s']:9.2f}"
                  + ("" if x["fits"] else f"  NO: {x['reason']}"))
        held = (f"{fw}'s terms (experts included) and the runtime floor "
                "(CUDA context, NCCL ring and all-to-all buffers, cuBLAS, "
                "allocator slack), headroom = GB of the GPU less GB/GPU"
                if real else f"{args.reserve_gb:g} GB reserved per GPU")
        print("assumed: bf16 weights and grads, fp32 Adam sharded over "
              f"replicas ({'FSDP' if moe_zero(fw, 2) > 1 else 'ZeRO-1'}),"
              f" full recomputation, 1F1B, a uniform router, matmuls at "
              f"{args.efficiency:.0%} of peak; a2a not overlapped "
              f"(DualPipe would hide it); {held}")
        if real and ok:
            print(f"{ok[0]['name']}: {ok[0]['verdict']}")
    if not ok:
        print("no layout fits", file=sys.stderr)
        return 1
    return 0
