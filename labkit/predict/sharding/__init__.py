"""Communication of one data-parallel step: DDP, ZeRO, FSDP (pure Python).

    python -m labkit comm --params 7e9 --gpus 8 --strategy zero3
    python -m labkit comm --params 70e9 --gpus 64 --strategy hybrid_shard \
        --gpus-per-node 8 --link nvlink4 --inter-link ib-ndr --json
    python -m labkit comm --params 7e9 --gpus 8 --strategy full_shard \
        --tokens-per-gpu 16384          # can the traffic hide behind compute?

This file is the command line; the answers live one concept per file and
are all reachable from here, as the labs and chapters use them
(``sharding.step_comm``, ``sharding.overlap``, ``sharding.predict_calls``):

- :mod:`labkit.predict.sharding.traffic`: the collectives of a step per
  strategy and their volume in units of Phi (:func:`step_comm`,
  :func:`units_of_phi`, :func:`volume`; Rajbhandari et al. 2020, "ZeRO",
  Sec. 7; Zhao et al. 2023, "PyTorch FSDP", Sec. 3.2.2 for HYBRID_SHARD);
- :mod:`labkit.predict.sharding.timing`: their time on the links and how
  much of it compute hides (:func:`comm_time`, :func:`overlap`);
- :mod:`labkit.predict.sharding.calls`: exact per-call sizes for a real
  model (with FSDP's padding and DDP's buckets, and which calls stay
  inside a node).

The folder: ``traffic``, ``calls``, ``timing``, ``names`` and
``accumulation``; they import one another and ``labkit.predict``, never
this ``__init__``. Pure Python.
"""
from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict

from labkit.predict.collectives import get_link, LINKS
# Re-exported: none of these modules imports this one (no import circle);
# they read the strategy names from strategy_names.
from labkit.predict.sharding.calls import (  # noqa: F401 (re-exported)
    ddp_buckets, fsdp_unit_numel, node_of_rank, node_split, predict_calls,
    summarize)
from labkit.predict.sharding.timing import (  # noqa: F401 (re-exported)
    GPU_PEAK_FLOPS, comm_time, overlap)
from labkit.predict.sharding.traffic import (  # noqa: F401 (re-exported)
    Comm, step_comm, units_of_phi, volume)
from labkit.predict.sharding.names import (ALIASES, PHI_UNITS,  # noqa
                                           STRATEGIES, _positive,
                                           canonical)

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
