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
(a batch that divides by the world size...). Every name of every lab's
``parameters`` cell has its rule here (tests/test_checks_params.py holds
the notebooks to it), so no value reaches a rank unchecked; a profile
narrows a few bounds (:data:`PROFILE_LIMITS`: what the CPU profile
allows), and each profile YAML is checked by the same table.
"""
from __future__ import annotations

import os
import types

import labkit.checks.rules as R

BIG = 2 ** 20            # batches, dimensions, counts: larger is a typo
STEPS = 100_000          # a lab step runs in seconds; more is not a lab
BYTES = 2 ** 34          # collective message sizes (16 GiB: an H100's 80
                         # GB holds the send and the receive buffer)
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


def _positive(name, v):   # a rate or a budget: 1e18 is an exascale rank
    return R.number(name, v, 0, 1e18, open_low=True)


def _rate_or_measured(name, v):   # lab 12: FLOP/s, or this CPU's
    if v == "measured":
        return v
    if isinstance(R._parse(v), str):
        R.refuse(name, v, "a finite number > 0 (FLOP/s) or 'measured'")
    return _positive(name, v)


def _seconds(name, v):   # a timeout: finite, positive, under a day
    return R.number(name, v, 0, 86_400, open_low=True)


def _name(name, v):
    """A name (a string), as the lab's own check then reads it."""
    if not isinstance(v, str) or not v:
        R.refuse(name, v, "a name (a non-empty string)")
    return v


def _optional(rule):
    """``None`` (the lab's default) or ``rule``'s value."""
    return lambda name, v: None if R._parse(v) is None else rule(name, v)


def _preset(name, v):
    from labkit.predict.model.arch import PRESETS     # pure Python
    R.require(isinstance(v, str) and v in PRESETS, f"{name}: unknown "
              f"preset {R._show(v)}; choose from {', '.join(sorted(PRESETS))}")
    return v


def _ledger(name, v):
    """Lab 14's FP8 ledger: a preset and its sizes."""
    v = R._parse(v)
    if not isinstance(v, dict) or "preset" not in v:
        R.refuse(name, v, "a dict such as {'preset': 'llama3-8b', "
                 "'gpus': 8, 'seq': 8192, 'micro_batch': 1}")
    rest = R.mapping(name, {k: x for k, x in v.items() if k != "preset"},
                     BIG)
    return {**rest, "preset": _preset(f"{name}['preset']", v["preset"])}


def _layout(name, v):
    """Lab 12's over-budget layout: names, and a micro-batch."""
    v = R._parse(v)
    if not isinstance(v, dict):
        R.refuse(name, v, "a dict such as {'strategy': 'ddp', "
                 "'recompute': 'none', 'micro_batch': 8}")
    return {k: R.integer(f"{name}[{k!r}]", x, 1, BIG) if k == "micro_batch"
            else _name(f"{name}[{k!r}]", x) for k, x in v.items()}


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


def _environment(name, v):
    """Environment variables: a dict of names to strings."""
    v = R._parse(v)
    if not isinstance(v, dict) or not all(
            isinstance(k, str) and k and isinstance(x, str)
            for k, x in v.items()):
        R.refuse(name, v, "a dict of variable names to strings, such as "
                 "{'NCCL_DEBUG': 'WARN'}")
    return v


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
    "accumulation_micro_batch": _optional(_int()),
    "dataset": _int(), "chunks": _int(), "check_microbatches": _int(),
    "pp_microbatches": _int(), "microbatches": _ints(),
    "layers": _int(), "hidden": _int(), "heads": _int(), "seq": _int(),
    "vocab": _int(), "head_dim": _int(), "factor": _int(2, BIG),
    "kv_heads": _int(),
    "experts": _int(), "top_k": _int(), "expert_ffn": _int(),
    "ffn": _int(), "block": _int(), "ks": _ints(),
    "matmul_sizes": _ints(1, 65536), "stream_sizes": _ints(1, 2 ** 31),
    "threads": _int(1, 1024), "global_tokens": _int(1, 2 ** 40),
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
    "budget_bytes": _positive, "flops_per_s": _rate_or_measured,
    "link_bytes_per_s": _positive,
    "loss_tolerance": lambda name, v: R.number(name, v, 0, 1e6),
    "bucket_caps_mb": lambda name, v: R.numbers(name, v, 0, high=2 ** 20),
    "capacity_factors": lambda name, v: R.numbers(name, v, 0, high=1e4),
    "aux": lambda name, v: R.number(name, v, 0, 1e6),
    # switches and names
    "bf16": R.boolean, "reference": R.boolean, "fit_to_gpu": R.boolean,
    "deepspeed": R.boolean, "pin_memory": R.boolean,
    "strategies": R.strings, "variants": R.strings, "fsdp": R.strings,
    "plugins": R.strings, "compare": R.strings, "hybrid": R.strings,
    "layouts": R.strings, "schedules": R.strings, "formats": R.strings,
    "dtypes": R.strings, "chips": R.strings,
    "recompute_strategies": R.strings, "accumulation_runs": R.strings,
    "deepspeed_stages": _ints(0, 3, empty=True),
    "dtype": lambda name, v: v if isinstance(v, str) else R.refuse(
        name, v, "a dtype name such as 'fp32'"),
    "step_dtype": lambda name, v: v if isinstance(v, str) else R.refuse(
        name, v, "a dtype name such as 'fp32'"),
    # lab 13: the routers' learning rate (SGD step size)
    "lr": lambda name, v: R.number(name, v, 0, 10, open_low=True),
    # lab 14: the loss scaler (torch.amp.GradScaler; fp16's largest
    # finite value is 65504, a scale past 2**64 is no experiment)
    "init_scale": lambda name, v: R.number(name, v, 0, 2 ** 64, True),
    "scaler_steps": _int(1, STEPS), "growth_interval": _int(1, STEPS),
    "preset": _preset, "compile_preset": _preset,
    "fp8_ledger": _ledger, "over_budget": _layout,
    "fp8": _name, "compile_backend": _name,
    "link": _optional(_name), "ranks_backend": _optional(_name),
    "results_dir": _optional(_name), "nvme_path": lambda name, v: v
    if isinstance(v, str) else R.refuse(name, v, "a folder ('' : none)"),
    # lab 17: the planted fault's rank, step and kinds, and the NCCL
    # environment its GPU profiles set (names to strings)
    "culprit": _int(0, BIG), "at": _int(0, STEPS),
    "faults": lambda name, v: R.strings(name, v, empty=False),
    "nccl_env": _environment,
    # lab 19: the optimizers it trains and Muon's ways to see a matrix
    "optimizers": lambda name, v: R.strings(name, v, empty=False),
    "muon_modes": R.strings,
}
# What a profile allows beyond the table: the CPU profile runs gloo ranks
# on a laptop's cores (a 1 TB all-reduce there runs for hours).
PROFILE_LIMITS = {"cpu": {"min_bytes": 2 ** 28, "max_bytes": 2 ** 28}}


def parse(params: dict) -> dict:
    """Each value of ``params`` that has a rule, checked (and a string
    parsed); returns the parsed values by name. A module is never a
    parameter: lab 14 imports ``labkit.arch`` as ``arch``, the name of
    lab 6's parameter (papermill's parameters are plain data)."""
    out = {name: RULES[name](name, params[name])
           for name in RULES if name in params
           and not isinstance(params[name], types.ModuleType)}
    for name, high in PROFILE_LIMITS.get(out.get("profile"), {}).items():
        R.require(name not in out or out[name] <= high,
                  f"{name}={out.get(name)!r}: at most {high:,} on the "
                  f"{out['profile']} profile")
    return out
