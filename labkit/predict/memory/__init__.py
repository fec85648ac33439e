"""The memory ledger: where the bytes of training go, per GPU (pure Python).

    python -m labkit memory --params 70e9 --gpus 8 --gpu-mem 80 --stage 3
    python -m labkit memory --params 70e9 --gpus 8 --gpu-mem 80 --stage 3 \
        --offload optimizer --json
    python -m labkit memory --hf-config config.json --gpus 8 --stage 3

This file is the command line; the answers live one concept per file and
are all reachable from here, as the chapters and labs use them
(``memory.ledger``, ``memory.smallest_gpus``, ...):

- :mod:`labkit.predict.memory.states`: the model states one GPU holds
  (Rajbhandari et al. 2020, "ZeRO", Sec. 3.1 and Fig. 1: 16 Psi bytes
  with mixed-precision Adam, partitioned over the N_d data-parallel ranks
  term by term as the ZeRO stage rises): :func:`bytes_per_param`,
  :func:`ledger`;
- :mod:`labkit.predict.memory.fitting`: whether they fit, the fewest GPUs,
  or the offload that fits: :func:`verdict`, :func:`smallest_gpus`;
- :mod:`labkit.predict.memory.activation_budget`: activations, a separate term
  (Korthikanti et al. 2022, Table 2), see
  :func:`activation_bytes_per_layer`;
- :mod:`labkit.predict.model.params`: the parameter count :func:`gpt_params`.

All sizes are bytes; the command line prints GB = 1e9 bytes (not GiB), as
the ZeRO paper and the course do.

The folder: ``states`` (the ledger of model states), ``fitting`` (what
fits), ``activation_budget`` (Korthikanti's closed form). Pure Python.
"""
from __future__ import annotations

import argparse
import json

# Re-exported: none of these modules imports this one (no import circle).
from labkit.predict.memory.activation_budget import (  # noqa: F401 (re-exported)
    activation_bytes_model, activation_bytes_per_layer, layers_that_fit)
from labkit.predict.memory.states import (  # noqa: F401 (re-exported)
    FSDP_STRATEGIES, OFFLOADS, OPTIMIZERS, PRECISIONS, STRATEGIES, ZERO_STAGE,
    BytesPerParam, Ledger, bytes_per_param, ledger)
from labkit.predict.memory.fitting import (  # noqa: F401 (re-exported)
    fits, smallest_gpus, verdict)
from labkit.predict.model.params import gpt_params  # noqa: F401 (re-exported)

GB = 1e9
HOST_MEM_GB = 2048.0   # DGX A100 80 GB / H100 / H200: 2 TB (cluster.GPUS)


# -- command line -------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    from labkit.predict.model import arch
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
    from labkit.predict.memory.frameworks import FRAMEWORKS
    p.add_argument("--framework", default="ledger", choices=FRAMEWORKS,
                   help="what the framework allocates beside the ledger: "
                        "ledger (none), deepspeed, fsdp2, fsdp1, megatron")
    p.add_argument("--host-mem", type=float, default=HOST_MEM_GB,
                   help="host memory of one node in GB (default: a DGX "
                        "H100's 2 TB)")
    for name, unit in (("cuda-context-gb", "GB"), ("nccl-buffsize", "bytes"),
                       ("nccl-channels", "channels"), ("slack", "fraction")):
        p.add_argument(f"--{name}", type=float, default=None,
                       help=f"runtime floor: {name.replace('-', ' ')} "
                            f"({unit}; labkit.predict.memory.floor)")
    p.add_argument("--json", action="store_true",
                   help="bytes per GPU as JSON instead of a table in GB")


def main(args) -> int:
    from labkit.predict.model import arch
    from labkit.predict.model.params import total
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
    job = real_job(args, rec, strategy, kw)
    if args.json:
        print(json.dumps(as_json(led, job, args.gpu_mem * GB), indent=1))
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
    if not job["fits"]:
        msg = []
        if job.get("smallest_gpus"):
            msg.append(f"fewest GPUs that fit with the floor: "
                       f"{job['smallest_gpus']} ({job['smallest_nodes']} "
                       f"node(s) of {args.gpus_per_node})")
        if job.get("offload_that_fits"):
            msg.append(f"or offload the {job['offload_that_fits']} on "
                       f"{args.gpus} GPUs")
        if msg:
            print("; ".join(msg))
    return 0


def as_json(led, job: dict, gpu_mem: float) -> dict:
    """The command's JSON: the ledger, the verdict of the whole job (its
    need with the floor, the headroom, what fits instead), and the terms
    beside the ledger as records."""
    v = {"fits": job["fits"], "gpu_total": job["gpu_need"],
         "gpu_mem": gpu_mem, "headroom": job["headroom"],
         "host_need": job["host"]["need"], "host_mem": job["host"]["have"],
         "host_fits": job["host"]["fits"], "sentence": job["sentence"]}
    v.update({k: job[k] for k in ("smallest_gpus", "smallest_nodes",
                                  "offload_that_fits") if k in job})
    floor = [{"name": n, "bytes": b, "source": src}
             for n, b, src in job["floor"]["terms"]]
    return {"ledger": led.as_dict(), "verdict": v,
            "framework": job["framework"], "floor": floor,
            "unit": "bytes per GPU"}


def real_job(args, rec, strategy: str, kw: dict) -> dict:
    """The ledger plus the framework's terms, the runtime floor and the
    host (:func:`labkit.predict.memory.job.job`) for the command's
    arguments; ``kw``: the ledger's own (precision, offload, ...)."""
    from labkit.predict.memory.frameworks import record_sizes
    from labkit.predict.memory.job import job
    # a family the record does not know: its sizes counted on
    # transformers' build (labkit.measure.hf_build.unknown)
    sizes = (record_sizes(rec) if rec is not None
             else getattr(args, "sizes", None))
    if sizes is None and (args.framework in ("fsdp2", "fsdp1") or (
            args.framework == "deepspeed" and strategy == "zero3")):
        raise ValueError(f"--framework {args.framework} at this stage needs "
                         "the model's layers: give --hf-config or --preset")
    floor_kw = {k: getattr(args, k) for k in (
        "cuda_context_gb", "nccl_buffsize", "nccl_channels", "slack")
        if getattr(args, k) is not None}
    return job(args.params, args.gpus, strategy, gpu_mem=args.gpu_mem * GB,
               host_mem=args.host_mem * GB, gpus_per_node=args.gpus_per_node,
               framework=args.framework, floor_kw=floor_kw,
               sizes=sizes, **kw)
