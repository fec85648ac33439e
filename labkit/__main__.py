"""Command line of the course: ``python -m labkit COMMAND ...``.

    python -m labkit memory --params 70e9 --gpus 8 --gpu-mem 80 --stage 3
    python -m labkit comm --params 7e9 --gpus 8 --strategy zero3
    python -m labkit flops --layers 96 --hidden 12288 --heads 96 --seq 2048 \
        --vocab 51200 --batch 1536
    python -m labkit params --hf-config config.json --json
    python -m labkit pipeline --schedule 1f1b --stages 4 --microbatches 8
    python -m labkit profile RUN_DIR
    python -m labkit plan --params 70e9 --gpus 8 --gpu a100-80gb --batch 64

Each command lives in the module named below and exposes
``add_arguments(parser)`` and ``main(args) -> int``. Bad input: a one-line
error on stderr and exit status 2, whatever the input (labkit.cli_rules):
every number is finite and inside the bounds of ``LIMITS`` (a size that
would make the work explode is refused before it starts), every file
argument is a regular file (or the folder it must be), and any error the
command raises -- out of memory, too deep a JSON, a full disk -- is said
in one line, not as a traceback (``LABKIT_TRACEBACK=1`` shows it).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys


COMMANDS = {
    "memory": ("labkit.predict.memory", "per-GPU memory ledger (ZeRO stages, FSDP, offload)"),
    "comm": ("labkit.predict.sharding", "communication volume and time per step"),
    "flops": ("labkit.predict.model.flops", "parameters, FLOPs per iteration, MFU"),
    "params": ("labkit.predict.model.params", "parameters of a model's config.json, per component"),
    "pipeline": ("labkit.predict.pipeline_parallel", "pipeline schedules and bubble fraction"),
    "profile": ("labkit.measure.profiling", "compute / comm / data / idle breakdown of traces"),
    "preflight": ("labkit.preflight", "is this machine what a lab profile needs? (exit 0/1/2)"),
    "plan": ("labkit.predict.choosing.plan_cli", "rank parallel layouts: memory, step time, MFU"),
    "dryrun": ("labkit.dryrun.cli", "every lab at its GPU sizes on fake tensors: bytes per rank"),
    "build": ("labkit.measure.hf_build", "any config transformers builds, on fake tensors: params, FLOPs, activations"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def main(argv=None) -> int:
    # here, not at the top: the in-page calculators import COMMANDS in the
    # browser (Pyodide), where cli_rules' signals and files do not exist
    from labkit import cli_rules
    from labkit.predict.model.hf_config import UnknownFamily
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        for name, (module, help_) in COMMANDS.items():
            print(f"  {name:9s} {help_}  [{module}]")
        return 0 if argv else 2
    name = argv[0]
    if name not in COMMANDS:
        sys.stderr.write(f"python -m labkit: error: unknown command {name!r} "
                         f"(choose from {', '.join(COMMANDS)})\n")
        return 2
    module = importlib.import_module(COMMANDS[name][0])  # only the one asked
    parser = _Parser(prog=f"python -m labkit {name}",
                     description=COMMANDS[name][1])
    module.add_arguments(parser)
    cli_rules.apply(name, parser)
    args = parser.parse_args(argv[1:])
    try:
        cli_rules.check_costs(name, args)
        # a command whose work varies by orders derives its own limit
        budget = getattr(module, "time_limit", None)
        with cli_rules.time_limit(*(budget(args) if budget else ())):
            try:
                return module.main(args) or 0
            except UnknownFamily as e:   # transformers' build answers
                from labkit.measure.hf_build import unknown
                return unknown.unknown_family(name, args, e) or 0
    except KeyboardInterrupt:
        sys.stderr.write(f"python -m labkit {name}: interrupted\n")
        return 130
    except Exception as e:  # noqa: BLE001 -- the one-line rule
        if os.environ.get("LABKIT_TRACEBACK"):
            raise
        sys.stderr.write(f"python -m labkit {name}: error: "
                         f"{cli_rules.one_line(e)}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
