"""The memory ledger: where the bytes of training go, per GPU (pure Python).

    python -m labkit memory --params 70e9 --gpus 8 --gpu-mem 80 --stage 3
    python -m labkit memory --params 70e9 --gpus 8 --gpu-mem 80 --stage 3 \
        --offload optimizer --json
    python -m labkit memory --hf-config config.json --gpus 8 --stage 3

This file is the command line; the answers live one concept per file and
are all reachable from here, as the chapters and labs use them
(``memory.ledger``, ``memory.smallest_gpus``, ...):

- :mod:`labkit.predict.memory_ledger`: the model states one GPU holds
  (Rajbhandari et al. 2020, "ZeRO", Sec. 3.1 and Fig. 1: 16 Psi bytes
  with mixed-precision Adam, partitioned over the N_d data-parallel ranks
  term by term as the ZeRO stage rises): :func:`bytes_per_param`,
  :func:`ledger`;
- :mod:`labkit.predict.memory_verdict`: whether they fit, the fewest GPUs,
  or the offload that fits: :func:`verdict`, :func:`smallest_gpus`;
- :mod:`labkit.predict.activation_budget`: activations, a separate term
  (Korthikanti et al. 2022, Table 2), see
  :func:`activation_bytes_per_layer`;
- :mod:`labkit.predict.params`: the parameter count :func:`gpt_params`.

All sizes are bytes; the command line prints GB = 1e9 bytes (not GiB), as
the ZeRO paper and the course do.
"""
from __future__ import annotations

import argparse
import json

# Re-exported: none of these modules imports this one (no import circle).
from labkit.predict.activation_budget import (  # noqa: F401 (re-exported)
    activation_bytes_model, activation_bytes_per_layer, layers_that_fit)
from labkit.predict.memory_ledger import (  # noqa: F401 (re-exported)
    FSDP_STRATEGIES, OFFLOADS, OPTIMIZERS, PRECISIONS, STRATEGIES, ZERO_STAGE,
    BytesPerParam, Ledger, bytes_per_param, ledger)
from labkit.predict.memory_verdict import (  # noqa: F401 (re-exported)
    fits, smallest_gpus, verdict)
from labkit.predict.params import gpt_params  # noqa: F401 (re-exported)

GB = 1e9
HOST_MEM_GB = 2048.0   # DGX A100 80 GB / H100 / H200: 2 TB (cluster.GPUS)


# -- command line -------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    from labkit.predict import arch
    arch.add_arguments(p)   # the count from a config.json or a preset
    p.add_argument("--params", type=float,
                   help="number of parameters, e.g. 70e9")
    p.add_argument("--gpus", type=int, default=8, help="data-parallel ranks")
    p.add_argument("--gpu-mem", type=float, default=80.0,
                   help="memory of one GPU in GB (1e9 bytes)")
    p.add_argument("--stage", type=int, default=3,
                   help="ZeRO stage 0-3 (0 = DDP, 3 = FSDP FULL_SHARD)")
    p.add_argument("--strategy", choices=FSDP_STRATEGIES,
                   help="an FSDP sharding strategy instead of --stage")
    p.add_argument("--shard-group", type=int,
                   help="ranks per shard group (hybrid_shard)")
    p.add_argument("--offload", choices=OFFLOADS, default="none")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adam")
    p.add_argument("--precision", choices=PRECISIONS, default="mixed")
    p.add_argument("--fp32-grads", action="store_true",
                   help="accumulate gradients in fp32 (mixed precision)")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--framework", default="ledger",
                   help="what the framework allocates beside the ledger: "
                        "ledger (none), deepspeed, fsdp2, fsdp1, megatron")
    p.add_argument("--host-mem", type=float, default=HOST_MEM_GB,
                   help="host memory of one node in GB (default: a DGX "
                        "H100's 2 TB)")
    for name, unit in (("cuda-context-gb", "GB"), ("nccl-buffsize", "bytes"),
                       ("nccl-channels", "channels"), ("slack", "fraction")):
        p.add_argument(f"--{name}", type=float, default=None,
                       help=f"runtime floor: {name.replace('-', ' ')} "
                            f"({unit}; labkit.predict.runtime_floor)")
    p.add_argument("--json", action="store_true",
                   help="bytes per GPU as JSON instead of a table in GB")


def main(args) -> int:
    from labkit.predict import arch
    from labkit.predict.params import total
    rec = arch.from_args(args)
    if (rec is None) == (args.params is None):
        raise ValueError("give --params N or --hf-config PATH / --preset "
                         "NAME (one of them)")
    if rec is not None:
        args.params = float(total(rec))
    if args.stage not in (0, 1, 2, 3):
        raise ValueError(f"--stage must be 0, 1, 2 or 3, got {args.stage}")
    if args.gpu_mem <= 0:
        raise ValueError(f"--gpu-mem must be positive, got {args.gpu_mem:g}")
    if args.gpus_per_node < 1:
        raise ValueError("--gpus-per-node must be >= 1")
    strategy = args.strategy or ("ddp", "zero1", "zero2", "zero3")[args.stage]
    kw = dict(precision=args.precision, optimizer=args.optimizer,
              offload=args.offload, fp32_grads=args.fp32_grads)
    if args.shard_group is not None:
        kw["shard_group"] = args.shard_group
    led = ledger(args.params, args.gpus, strategy, **kw)
    v = verdict(args.params, args.gpus, args.gpu_mem * GB, strategy,
                gpus_per_node=args.gpus_per_node, **kw)
    job = real_job(args, rec, led, strategy)
    if args.json:
        print(json.dumps({"ledger": led.as_dict(), "verdict": v, "job": job,
                          "unit": "bytes per GPU"}, indent=1))
        return 0
    print(f"{strategy} ({args.precision}, {args.optimizer}, offload "
          f"{args.offload}): {args.params:g} parameters on {args.gpus} GPUs"
          f" of {args.gpu_mem:g} GB  (GB = 1e9 bytes)")
    print(f"{'':34s}{'GPU':>10s}{'CPU':>10s}")
    for name in ("params", "grads", "optimizer"):
        gpu = getattr(led, f"{name}_gpu")
        if name == "params":
            gpu += led.transient_gpu
        cpu = getattr(led, name + "_cpu")
        print(f"{name:34s}{gpu / GB:10.2f}{cpu / GB:10.2f}")
    print(f"{'ledger total':34s}{led.gpu_total / GB:10.2f}"
          f"{led.cpu_total / GB:10.2f}")
    for t in job["framework"]:
        mark = "(a bound, not added) " if t["bound"] else ""
        print(f"+ {args.framework} {t['name']:{31 - len(args.framework)}s}"
              f"{t['gpu'] / GB:10.2f}{t['cpu'] / GB:10.2f}  {mark}"
              f"{t['source']}")
    for name, b, src in job["floor"]["terms"]:
        print(f"+ {name:32s}{b / GB:10.2f}{0:10.2f}  {src}")
    print(f"{'per GPU (activations on top)':34s}{job['gpu_need'] / GB:10.2f}"
          f"{job['cpu_need'] / GB:10.2f}")
    h = job["host"]
    print(f"host per node: {h['need'] / GB:.2f} GB of {h['have'] / GB:g} GB "
          f"({args.gpus_per_node} ranks x {job['cpu_need'] / GB:.2f} GB)")
    print(job["sentence"])
    if not v["fits"]:
        msg = (f"the ledger alone: {led.gpu_total / GB:.2f} GB > "
               f"{args.gpu_mem:g} GB")
        if v.get("smallest_gpus"):
            msg += (f"; fewest GPUs that fit: {v['smallest_gpus']} "
                    f"({v['smallest_nodes']} node(s) of "
                    f"{args.gpus_per_node})")
        if v.get("offload_that_fits"):
            msg += (f"; or offload the {v['offload_that_fits']} on "
                    f"{args.gpus} GPUs")
        print(msg)
    return 0


def real_job(args, rec, led, strategy: str) -> dict:
    """The ledger plus the framework's terms, the runtime floor and the
    host: what one rank and one node of the reader's job hold, and the
    headroom left (:mod:`labkit.predict.frameworks`,
    :mod:`labkit.predict.runtime_floor`)."""
    from labkit.predict import frameworks as F
    from labkit.predict.runtime_floor import floor, headroom_sentence
    sizes = {}
    needs_sizes = (args.framework in ("fsdp2", "fsdp1") or
                   (args.framework == "deepspeed" and strategy == "zero3"))
    if rec is not None:
        sizes = F.record_sizes(rec)
    elif needs_sizes:
        raise ValueError(f"--framework {args.framework} at this stage needs "
                         "the model's layers: give --hf-config or --preset")
    if args.host_mem is not None and not args.host_mem > 0:
        raise ValueError(f"--host-mem must be positive, got {args.host_mem}")
    terms = F.terms(args.framework, ledger_strategy=strategy,
                    params=args.params, gpus=args.gpus,
                    gpus_per_node=args.gpus_per_node, offload=args.offload,
                    precision=args.precision, **sizes)
    added = [t for t in terms if not t.bound]
    gpu = led.gpu_total + sum(t.gpu for t in added)
    cpu = led.cpu_total + sum(t.cpu for t in added)
    fl = floor(args.gpus, allocated=gpu,
               cuda_context_gb=args.cuda_context_gb,
               nccl_buffsize=args.nccl_buffsize,
               nccl_channels=args.nccl_channels, slack=args.slack)
    need = gpu + fl["total"]
    ranks = min(args.gpus, args.gpus_per_node)
    host = {"need": cpu * ranks, "have": args.host_mem * GB,
            "fits": cpu * ranks <= args.host_mem * GB}
    sentence = headroom_sentence(need, args.gpu_mem * GB)
    if not host["fits"]:
        sentence = (f"does not fit: the host needs {host['need'] / GB:.0f} GB"
                    f" per node, has {args.host_mem:g} GB (offload "
                    f"{args.offload}); GPU: {sentence}")
    return {"framework": [t.as_dict() for t in terms], "floor": fl,
            "gpu_need": need, "cpu_need": cpu, "host": host,
            "headroom": args.gpu_mem * GB - need,
            "fits": need <= args.gpu_mem * GB and host["fits"],
            "sentence": sentence}
