"""Communication of one data-parallel step: DDP, ZeRO, FSDP (pure Python).

    python -m labkit comm --params 7e9 --gpus 8 --strategy zero3
    python -m labkit comm --params 70e9 --gpus 64 --strategy hybrid_shard \
        --gpus-per-node 8 --link nvlink4 --inter-link ib-ndr --json
    python -m labkit comm --params 7e9 --gpus 8 --strategy full_shard \
        --tokens-per-gpu 16384          # can the traffic hide behind compute?

Per rank and step, with Phi the bytes of one full copy of the parameters
(or gradients), every data-parallel strategy is built from three collectives
(sizes are logical payloads, see ``labkit.predict.collectives``):

=================  ===============================  ==========  =========
strategy           collectives per step             sent / rank  ZeRO
=================  ===============================  ==========  =========
ddp, no_shard      all-reduce grads (Phi)           2 Phi        0
zero1, zero2       reduce-scatter grads (Phi),      2 Phi        1, 2
                   all-gather params (Phi)
shard_grad_op      all-gather fwd (Phi),            2 Phi        "2"
                   reduce-scatter grads (Phi)
zero3, full_shard  all-gather fwd (Phi), all-gather  3 Phi       3
                   bwd (Phi), reduce-scatter (Phi)
hybrid_shard       full_shard inside a shard group   3 Phi in,
                   of F ranks + all-reduce of the    2 Phi/F
                   grad shard (Phi/F) across the     across
                   N/F replicas
=================  ===============================  ==========  =========

"sent / rank" is the ZeRO paper's communication volume (Rajbhandari et al.
2020, "ZeRO", Sec. 7.1: an all-reduce costs 2 Psi, one reduce-scatter plus
one all-gather; Sec. 7.2.1: ZeRO-1/2 also 2 Psi; Sec. 7.2.2: ZeRO-3 3 Psi,
1.5x). It counts a ring's (N-1)/N as 1; :func:`step_comm` keeps the exact
factor. HYBRID_SHARD (Zhao et al. 2023, "PyTorch FSDP: Experiences on
Scaling Fully Sharded Data Parallel", Sec. 3.2.2) keeps the parameter
all-gathers and the gradient reduce-scatter inside a group of F ranks --
usually one node -- and sends across nodes only the all-reduce of each
rank's gradient shard: per GPU 2(R-1)/R * Phi/F bytes between nodes for R
replicas, i.e. 2 M (W-1) / (G W) for W hosts of G GPUs and M bytes of
gradients, against 2 M (N-1)/N for DDP's all-reduce over all N = W G GPUs.

What a counter sees (``labkit.measure.collectives``) is the *logical*
payload: DDP's all-reduce counts Phi, FULL_SHARD's all-gathers 2 Phi and its
reduce-scatter Phi. ``units_of_phi`` turns logical bytes into the ZeRO
volume (all-reduce x 2, the others x 1), so 2 for DDP and 3 for ZeRO-3.

Exact per-call sizes for a real model (with FSDP's padding and DDP's
buckets, and which calls stay inside a node) are in
:mod:`labkit.predict.sharding_calls`; its functions are also reachable
from here (``sharding.predict_calls``), as the labs and chapters use them.
"""
from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass

from labkit.predict.collectives import (collective_time, get_link,
                                        ring_bytes_sent, LINKS)

from labkit.predict.strategy_names import (ALIASES, PHI_UNITS,  # noqa
                                           STRATEGIES, _positive,
                                           canonical)


@dataclass
class Comm:
    """One kind of collective in a step, as one rank sees it."""
    op: str            # all_reduce | all_gather | reduce_scatter
    phase: str         # forward | backward | step (after the optimizer)
    what: str          # params | grads
    group_size: int
    scope: str         # intra (inside a node) | inter (spans nodes)
    nbytes: float      # logical payload, summed over the step's calls
    numel: float = 0.0  # the same in elements
    sent: float = 0.0  # bytes this rank sends on a ring
    seconds: float = 0.0


def step_comm(params: float, gpus: int, strategy: str,
              param_bytes: float = 2, grad_bytes: float | None = None,
              gpus_per_node: int = 8, shard_group: int | None = None
              ) -> list[Comm]:
    """The collectives of one step per rank, logical bytes and ring bytes.

    ``param_bytes``: bytes per element all-gathered (2 for bf16 weights);
    ``grad_bytes``: bytes per element reduced (defaults to param_bytes; 4
    when gradients are reduced in fp32, as DDP under autocast and FSDP's
    ``reduce_dtype=float32`` do). ``shard_group`` (hybrid only): ranks per
    shard group, by default one node (``min(gpus, gpus_per_node)``).
    """
    s = canonical(strategy)
    _positive(params=params, param_bytes=param_bytes)
    for name, v in (("gpus", gpus), ("gpus_per_node", gpus_per_node)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if gpus > gpus_per_node and gpus % gpus_per_node:
        raise ValueError(f"{gpus} GPUs are not whole nodes of "
                         f"{gpus_per_node}")
    grad_bytes = param_bytes if grad_bytes is None else grad_bytes
    _positive(grad_bytes=grad_bytes)
    phi_p, phi_g = params * param_bytes, params * grad_bytes
    n = gpus
    world_scope = "intra" if n <= gpus_per_node else "inter"
    if s.startswith("hybrid"):
        f = shard_group or min(gpus, gpus_per_node)
        if not isinstance(f, int) or f < 1 or n % f:
            raise ValueError(f"hybrid_shard: {n} GPUs are not a whole "
                             f"number of shard groups of {f!r}")
        r = n // f
        in_scope = "intra" if f <= gpus_per_node else "inter"
        cross = "intra" if n <= gpus_per_node else "inter"
        out = [Comm("all_gather", "forward", "params", f, in_scope, phi_p)]
        if s == "hybrid_shard":
            out.append(Comm("all_gather", "backward", "params", f, in_scope,
                            phi_p))
        out.append(Comm("reduce_scatter", "backward", "grads", f, in_scope,
                        phi_g))
        if r > 1:
            out.append(Comm("all_reduce", "backward", "grads", r, cross,
                            phi_g / f))
    elif shard_group not in (None, n):
        raise ValueError("shard_group applies to hybrid_shard only")
    elif s in ("ddp", "no_shard"):
        out = [Comm("all_reduce", "backward", "grads", n, world_scope, phi_g)]
    elif s in ("zero1", "zero2"):
        out = [Comm("reduce_scatter", "backward", "grads", n, world_scope,
                    phi_g),
               Comm("all_gather", "step", "params", n, world_scope, phi_p)]
    elif s == "shard_grad_op":
        out = [Comm("all_gather", "forward", "params", n, world_scope, phi_p),
               Comm("reduce_scatter", "backward", "grads", n, world_scope,
                    phi_g)]
    else:  # zero3, full_shard
        out = [Comm("all_gather", "forward", "params", n, world_scope, phi_p),
               Comm("all_gather", "backward", "params", n, world_scope,
                    phi_p),
               Comm("reduce_scatter", "backward", "grads", n, world_scope,
                    phi_g)]
    for c in out:
        c.sent = ring_bytes_sent(c.op, c.nbytes, c.group_size)
        c.numel = c.nbytes / (param_bytes if c.what == "params"
                              else grad_bytes)
    return out


def units_of_phi(comms, params: float) -> float:
    """ZeRO volume in units of Phi: sum(PHI_UNITS[op] * elements) / params.

    Counted in elements, as the ZeRO paper counts Psi, so that fp32
    gradients reduced beside bf16 weights still give 2 for DDP and 3 for
    ZeRO-3. Works on :class:`Comm` lists and on counter records (dicts with
    ``op`` and ``numel``) alike.
    """
    total = 0.0
    for c in comms:
        op, numel = ((c["op"], c["numel"]) if isinstance(c, dict)
                     else (c.op, c.numel))
        total += PHI_UNITS.get(op, 0) * numel
    return total / params


def volume(params: float, gpus: int, strategy: str, **kw) -> dict:
    """Totals of :func:`step_comm`: logical and sent bytes, by op and scope."""
    comms = step_comm(params, gpus, strategy, **kw)
    by_op: dict = {}
    for c in comms:
        d = by_op.setdefault(c.op, {"bytes": 0.0, "sent": 0.0})
        d["bytes"] += c.nbytes
        d["sent"] += c.sent
    return {
        "strategy": canonical(strategy), "params": params, "gpus": gpus,
        "by_op": by_op,
        "logical_bytes": sum(c.nbytes for c in comms),
        "sent_bytes": sum(c.sent for c in comms),
        "intra_node_sent_bytes": sum(c.sent for c in comms
                                     if c.scope == "intra"),
        "inter_node_sent_bytes": sum(c.sent for c in comms
                                     if c.scope == "inter"),
        "units_of_phi": units_of_phi(comms, params),
        "collectives": [asdict(c) for c in comms],
    }


# -- time and overlap ---------------------------------------------------------

GPU_PEAK_FLOPS = {  # dense 16-bit tensor-core peak, vendor datasheets
    "v100": 125e12, "a100": 312e12, "h100": 989e12, "b200": 2250e12}


def comm_time(comms: list[Comm], link="nvlink4", inter_link="ib-ndr",
              efficiency: float = 1.0) -> list[Comm]:
    """Fill ``seconds`` of each Comm with the ring alpha-beta model.

    A group inside a node runs at ``link``; a group that spans nodes runs at
    the slower ``inter_link`` (one NIC per GPU, as in DGX/HGX nodes).
    Each Comm is priced as one collective of its whole size (a lower bound:
    per-unit calls add one alpha term each).
    """
    lk, ilk = get_link(link), get_link(inter_link)
    for c in comms:
        c.seconds = collective_time(c.op, c.nbytes, c.group_size,
                                    lk if c.scope == "intra" else ilk,
                                    efficiency)
    return comms


def overlap(params: float, gpus: int, strategy: str, tokens_per_gpu: float,
            peak_flops: float = GPU_PEAK_FLOPS["h100"], mfu: float = 0.4,
            link="nvlink4", inter_link="ib-ndr", efficiency: float = 1.0,
            **kw) -> dict:
    """Can the step's communication hide behind its compute?

    Compute per rank: 6 * params * tokens FLOPs (Kaplan et al. 2020,
    "Scaling Laws for Neural Language Models", Sec. 2.1: 2 N per token
    forward, 4 N backward) at ``mfu`` of the GPU's peak. Forward
    all-gathers overlap the forward (FSDP's prefetch), backward all-gathers,
    reduce-scatters and all-reduces overlap the backward (DDP's buckets,
    FSDP's backward prefetch); ZeRO-1/2's all-gather after the optimizer
    step does not overlap. Exposed time per phase = max(0, comm - compute).
    """
    _positive(tokens_per_gpu=tokens_per_gpu, peak_flops=peak_flops)
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu must be in (0, 1], got {mfu}")
    comms = comm_time(step_comm(params, gpus, strategy, **kw), link,
                      inter_link, efficiency)
    rate = peak_flops * mfu
    compute = {"forward": 2 * params * tokens_per_gpu / rate,
               "backward": 4 * params * tokens_per_gpu / rate, "step": 0.0}
    comm = {p: sum(c.seconds for c in comms if c.phase == p)
            for p in compute}
    exposed = {p: max(0.0, comm[p] - compute[p]) for p in compute}
    total_comm = sum(comm.values())
    total_exposed = sum(exposed.values())
    compute_s = compute["forward"] + compute["backward"]
    step = compute_s + total_exposed
    return {"compute_s": compute_s, "comm_s": total_comm,
            "exposed_s": total_exposed, "step_s": step,
            "hidden_fraction": (1 - total_exposed / total_comm
                                if total_comm else 1.0),
            "scaling_efficiency": compute_s / step,
            "by_phase": {p: {"compute_s": compute[p], "comm_s": comm[p],
                             "exposed_s": exposed[p]} for p in compute}}


# The exact calls of a real model live in sharding_calls (one concept per
# file); they stay reachable as sharding.<name>. sharding_calls reads the
# strategy names from strategy_names, not from here: no import circle.
from labkit.predict.sharding_calls import (  # noqa: E402,F401
    ddp_buckets, fsdp_unit_numel, node_of_rank, node_split, predict_calls,
    summarize)

CALLS = ("fsdp_unit_numel", "ddp_buckets", "predict_calls", "node_of_rank",
         "node_split", "summarize")


# -- command line -------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", type=float, required=True,
                   help="number of parameters, e.g. 7e9")
    p.add_argument("--gpus", type=int, default=8, help="data-parallel ranks")
    p.add_argument("--strategy", default="zero3",
                   help="|".join(STRATEGIES))
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--shard-group", type=int,
                   help="ranks per shard group (hybrid; default one node)")
    p.add_argument("--link", default="nvlink4",
                   help="link inside a node: " + ", ".join(
                       k for k, v in LINKS.items() if v.scope == "intra"))
    p.add_argument("--inter-link", default="ib-ndr",
                   help="link between nodes: " + ", ".join(
                       k for k, v in LINKS.items() if v.scope == "inter"))
    p.add_argument("--param-bytes", type=float, default=2,
                   help="bytes per all-gathered element (2 = bf16)")
    p.add_argument("--grad-bytes", type=float,
                   help="bytes per reduced element (default = param bytes)")
    p.add_argument("--efficiency", type=float, default=1.0,
                   help="fraction of the links' peak bandwidth reached")
    p.add_argument("--tokens-per-gpu", type=float,
                   help="tokens per GPU and step: adds the overlap check")
    p.add_argument("--gpu", default="h100", choices=sorted(GPU_PEAK_FLOPS),
                   help="GPU whose 16-bit peak sets the compute time")
    p.add_argument("--mfu", type=float, default=0.4)
    p.add_argument("--json", action="store_true",
                   help="bytes and seconds as JSON")


def main(args) -> int:
    kw = dict(param_bytes=args.param_bytes, grad_bytes=args.grad_bytes,
              gpus_per_node=args.gpus_per_node, shard_group=args.shard_group)
    get_link(args.link)
    get_link(args.inter_link)
    v = volume(args.params, args.gpus, args.strategy, **kw)
    comms = comm_time([Comm(**c) for c in v["collectives"]], args.link,
                      args.inter_link, args.efficiency)
    v["collectives"] = [asdict(c) for c in comms]
    v["seconds"] = sum(c.seconds for c in comms)
    v.update(link=args.link, inter_link=args.inter_link,
             gpus_per_node=args.gpus_per_node,
             nodes=math.ceil(args.gpus / args.gpus_per_node))
    if args.tokens_per_gpu is not None:
        v["overlap"] = overlap(args.params, args.gpus, args.strategy,
                               args.tokens_per_gpu,
                               GPU_PEAK_FLOPS[args.gpu], args.mfu, args.link,
                               args.inter_link, args.efficiency, **kw)
    if args.json:
        print(json.dumps(v, indent=1))
        return 0
    gb = 1e9
    print(f"{v['strategy']}: {args.params:g} parameters on {args.gpus} GPUs "
          f"({v['nodes']} node(s) of {args.gpus_per_node}; {args.link} "
          f"inside, {args.inter_link} between); GB = 1e9 bytes")
    print(f"{'op':15s}{'phase':10s}{'group':>6s}{'scope':>7s}"
          f"{'logical GB':>12s}{'sent GB':>10s}{'ms':>9s}")
    for c in comms:
        print(f"{c.op:15s}{c.phase:10s}{c.group_size:6d}{c.scope:>7s}"
              f"{c.nbytes / gb:12.3f}{c.sent / gb:10.3f}"
              f"{c.seconds * 1e3:9.2f}")
    print(f"volume {v['units_of_phi']:.3g} Phi; sent per GPU "
          f"{v['sent_bytes'] / gb:.3f} GB (inside nodes "
          f"{v['intra_node_sent_bytes'] / gb:.3f}, between nodes "
          f"{v['inter_node_sent_bytes'] / gb:.3f}); "
          f"{v['seconds'] * 1e3:.2f} ms if nothing overlaps")
    if "overlap" in v:
        o = v["overlap"]
        print(f"compute {o['compute_s'] * 1e3:.1f} ms at {args.mfu:.0%} MFU "
              f"of a {args.gpu}; exposed communication "
              f"{o['exposed_s'] * 1e3:.1f} ms; hidden "
              f"{o['hidden_fraction']:.0%}; scaling efficiency "
              f"{o['scaling_efficiency']:.0%}")
    return 0
