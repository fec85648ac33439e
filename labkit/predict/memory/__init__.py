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
    v = verdict(args.params, args.gpus, args.gpu_mem * GB, strategy,
                gpus_per_node=args.gpus_per_node, **kw)
    if args.json:
        print(json.dumps({"ledger": led.as_dict(), "verdict": v,
                          "unit": "bytes per GPU"}, indent=1))
        return 0
    print(f"{strategy} ({args.precision}, {args.optimizer}, offload "
          f"{args.offload}): {args.params:g} parameters on {args.gpus} GPUs"
          f" of {args.gpu_mem:g} GB  (GB = 1e9 bytes)")
    print(f"{'':12s}{'GPU':>10s}{'CPU':>10s}")
    for name in ("params", "grads", "optimizer"):
        gpu = getattr(led, f"{name}_gpu")
        if name == "params":
            gpu += led.transient_gpu
        print(f"{name:12s}{gpu / GB:10.2f}{getattr(led, name + '_cpu') / GB:10.2f}")
    print(f"{'total':12s}{led.gpu_total / GB:10.2f}{led.cpu_total / GB:10.2f}")
    if v["fits"]:
        print(f"fits: {led.gpu_total / GB:.2f} GB <= {args.gpu_mem:g} GB "
              "(model states only; activations come on top)")
    else:
        msg = f"does not fit: {led.gpu_total / GB:.2f} GB > {args.gpu_mem:g} GB"
        if v.get("smallest_gpus"):
            msg += (f"; fewest GPUs that fit: {v['smallest_gpus']}"
                    f" ({v['smallest_nodes']} node(s) of {args.gpus_per_node})")
        if v.get("offload_that_fits"):
            msg += f"; or offload the {v['offload_that_fits']} on {args.gpus} GPUs"
        print(msg)
    return 0
