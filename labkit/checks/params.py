"""Every lab parameter's type and range, by its name, in one table.

    from labkit.checks.params import parse
    values = parse({"steps": "3", "timeout_s": 300})  # {"steps": 3, ...}
    parse({"global_batch": -8})    # ValueError: global_batch=-8: must be
                                   # an integer in [1, 1048576]

The labs share their parameters' names (``world_size``, ``steps``,
``timeout_s``...), so one table holds each name's rule and every lab gets
it: a value papermill hands over as a string is parsed or refused, a float
is never an integer, NaN and infinity are never a number, and a world size
is bounded by what this machine can run (:func:`max_ranks`). A lab's own
check (``labkit.checks.<lab>``) then checks how its values fit together
(a batch that divides by the world size...). Names not in the table are
left as they are.
"""
from __future__ import annotations

import os
import types

import labkit.checks.rules as R

BIG = 2 ** 20            # batches, dimensions, counts: larger is a typo
STEPS = 100_000          # a lab step runs in seconds; more is not a lab
BYTES = 2 ** 40          # collective message sizes
PROFILES = ("cpu", "gpu1", "gpu8")


def max_ranks() -> int:
    """The most processes one launch may start here: ``LABKIT_MAX_RANKS``
    if set, else 8 per CPU core (gloo forks one process per rank; a GPU
    node runs one per GPU, well under that)."""
    text = os.environ.get("LABKIT_MAX_RANKS", "")
    if text:
        return R.integer("LABKIT_MAX_RANKS", text, 1)
    return 8 * (os.cpu_count() or 1)


def _world(name, v):
    return R.integer(name, v, 1, max_ranks())


def _worlds(name, v):
    return R.integers(name, v, 1, max_ranks())


def _int(low=1, high=BIG):
    return lambda name, v: R.integer(name, v, low, high)


def _ints(low=1, high=BIG, empty=False):
    return lambda name, v: R.integers(name, v, low, high, empty)


def _positive(name, v):
    return R.number(name, v, 0, open_low=True)


def _seconds(name, v):   # a timeout: finite, positive, under a day
    return R.number(name, v, 0, 86_400, open_low=True)


ARCHS = ("gpt", "llama")   # labkit.nn.model.ARCHS (no torch import here)
# ``arch`` is a key of ``model`` (_model); labs 5 and 6, which have no
# model dict, take ``archs`` (lab 5) and ``arch`` (lab 6)


def _arch(name, v):
    R.require(v in ARCHS, f"{name}={v!r}: unknown architecture, choose "
              f"from {', '.join(ARCHS)}")
    return v


def _archs(name, v):
    return [_arch(name, x) for x in R.strings(name, v)]


def _model(name, v):
    """A model shape: positive integers, and ``arch`` (gpt or llama)."""
    v = R._parse(v)
    if isinstance(v, dict) and "arch" in v:
        rest = R.mapping(name, {k: x for k, x in v.items() if k != "arch"},
                         BIG)
        return {**rest, "arch": _arch(f"{name}['arch']", v["arch"])}
    return R.mapping(name, v, BIG)


def _profile(name, v):
    R.require(v in PROFILES, f"unknown profile {v!r}: choose from "
              f"{', '.join(PROFILES)}")
    return v


RULES = {
    "profile": _profile,
    # world sizes: bounded by the machine
    "world_size": _world, "reshard_world_size": _world,
    "hang_world_size": _world, "world_sizes": _worlds,
    "tp_sizes": _worlds, "stages": _worlds, "sweep_stages": _worlds,
    "shard_group": _world, "ep": _world,
    # counts of steps
    "steps": _int(1, STEPS), "compile_steps": _int(1, STEPS), "time_steps": _int(0, STEPS),
    "timing_steps": _int(0, STEPS), "repeats": _int(1, STEPS),
    "warmup": _int(0, STEPS), "iters": _int(1, STEPS),
    "wait": _int(0, STEPS), "active": _int(1, STEPS),
    "every": _int(1, STEPS), "kill_step": _int(0, STEPS),
    "kill_rank": _int(0, BIG),
    # batches and shapes
    "global_batch": _int(), "batch": _int(), "micro_batch": _int(),
    "dataset": _int(), "chunks": _int(), "check_microbatches": _int(),
    "pp_microbatches": _int(), "microbatches": _ints(),
    "layers": _int(), "hidden": _int(), "heads": _int(), "seq": _int(),
    "vocab": _int(), "head_dim": _int(), "factor": _int(2, BIG),
    "kv_heads": _int(),
    "experts": _int(), "top_k": _int(), "expert_ffn": _int(),
    "ffn": _int(), "block": _int(), "ks": _ints(),
    "workers": _int(0, 256), "sweep_workers": _ints(0, 256),
    "sweep_prefetch": _ints(1, 256),
    "min_bytes": _int(1, BYTES), "max_bytes": _int(1, BYTES),
    "reduce_bucket_size": _int(1, 2 ** 40),
    "model": _model,   # its "arch" key: _arch, above
    "archs": _archs,   # lab 5: the blocks it splits
    "arch": _arch,     # lab 6: the stages' blocks (no model dict)
    # real numbers
    "timeout_s": _seconds, "hang_timeout_s": _seconds,
    "compile_timeout_s": _seconds,
    "delay_ms": lambda name, v: R.number(name, v, 0, 60_000, True),
    "budget_bytes": _positive, "flops_per_s": _positive,
    "link_bytes_per_s": _positive,
    "loss_tolerance": lambda name, v: R.number(name, v, 0),
    "bucket_caps_mb": lambda name, v: R.numbers(name, v, 0),
    "capacity_factors": lambda name, v: R.numbers(name, v, 0),
    "aux": lambda name, v: R.number(name, v, 0),
    # switches and names
    "bf16": R.boolean, "reference": R.boolean, "fit_to_gpu": R.boolean,
    "deepspeed": R.boolean, "pin_memory": R.boolean,
    "strategies": R.strings, "variants": R.strings, "fsdp": R.strings,
    "plugins": R.strings, "compare": R.strings, "hybrid": R.strings,
    "layouts": R.strings, "schedules": R.strings, "formats": R.strings,
    "recompute_strategies": R.strings, "accumulation_runs": R.strings,
    "deepspeed_stages": _ints(0, 3, empty=True),
    "dtype": lambda name, v: v if isinstance(v, str) else R.refuse(
        name, v, "a dtype name such as 'fp32'"),
}


def parse(params: dict) -> dict:
    """Each value of ``params`` that has a rule, checked (and a string
    parsed); returns the parsed values by name. A module is never a
    parameter: lab 14 imports ``labkit.arch`` as ``arch``, the name of
    lab 6's parameter (papermill's parameters are plain data)."""
    return {name: RULES[name](name, params[name])
            for name in RULES if name in params
            and not isinstance(params[name], types.ModuleType)}
