"""How long a dry run may take: a limit from its work, not one number.

    seconds, how = time_limit(args)     # python -m labkit dryrun's args
    seconds, how = limit(work(layers=80, world_size=16))

Fake tensors cost time per operator, not per byte: a step's operators grow
with the layers, and a sharded model's with the ranks it is sharded over
(one shard per rank role, at least 8 of them in FSDP's bookkeeping). The
work of one case is ``layers x max(world_size, 8)`` "layer shards", as the
command line's cost bound counts a free shape (:data:`labkit.cli_rules.
COSTS`). The limit is that work at :data:`SECONDS_PER_UNIT` (measured:
the CPU seconds of a dry run over its layer shards), times :data:`BUSY`
for a machine whose cores are shared, and never below :data:`FLOOR_S`;
``python -m labkit dryrun`` stops at it in one line that names the
limit and how it was derived (``LABKIT_CLI_TIMEOUT_S`` overrides it).
"""
from __future__ import annotations

# measured on a 2-core machine: `python -m labkit dryrun --profile gpu8`
# took 82 CPU-seconds (its workers included) for the 3,632 layer shards of
# its 25 distinct cases, 0.023 s a shard; `--only fit` (lab 12's 7B cases)
# 23 CPU-s for 1,024, 0.022 s. The command line's calibration of a free
# shape (80 layers on 16 GPUs in 14 CPU-s) is cheaper, 0.011 s: the larger
SECONDS_PER_UNIT = 0.023
# a busy machine: with seven other jobs on the two cores the gpu8 dry run
# took 6 min of wall clock for its 82 CPU-s (4.4 x), `--only fit` 145 s
# for 23 CPU-s (6.3 x); 10 x leaves room above both
BUSY = 10.0
# the least a dry run gets: importing torch and forking the workers on a
# busy machine take tens of seconds before any case runs
FLOOR_S = 120.0


def work(layers: int, world_size: int) -> int:
    """Layer shards of one case (module doc)."""
    return layers * max(world_size, 8)


def _layers(p: dict) -> int:
    m = p.get("model")
    if isinstance(m, dict) and isinstance(m.get("layers"), int):
        return m["layers"]
    return p.get("layers") if isinstance(p.get("layers"), int) else 2


def work_of_cases(cases_by_lab: dict, profile: dict) -> int:
    """Layer shards of the distinct cases of a profile's labs."""
    seen, total = set(), 0
    for lab, cases in cases_by_lab.items():
        for c in cases:
            key = c.key or id(c)
            if key in seen:
                continue
            seen.add(key)
            total += work(_layers(profile.get(lab) or {}), c.world_size)
    return total


def limit(units: int) -> tuple[float, str]:
    """Seconds for ``units`` layer shards, and how they were derived."""
    raw = units * SECONDS_PER_UNIT * BUSY
    seconds = max(FLOOR_S, raw)
    how = (f"{units:,} layer shards x {SECONDS_PER_UNIT:g} s (measured "
           f"on fake tensors) x {BUSY:g} (a busy machine) = {raw:,.0f} s"
           + (f", raised to the floor of {FLOOR_S:g} s" if raw < FLOOR_S
              else ""))
    return seconds, how


def time_limit(a) -> tuple[float, str]:
    """The time limit of ``python -m labkit dryrun`` with args ``a``:
    the profile's distinct cases, or the one shape, in layer shards."""
    from labkit.dryrun import labs as L
    if a.profile:
        from labkit.preflight import load_profile
        prof = load_profile(a.profile)
        names = [n for n in prof if a.only in (None, n)]
        cases = {n: L.ADAPTERS[n](prof[n] or {}) for n in names
                 if n in L.ADAPTERS}
        return limit(work_of_cases(cases, prof))
    from labkit import arch
    rec = arch.from_args(a)
    layers = rec.layers if rec is not None else a.layers
    # every expert is a module of its own, with its own operators and
    # shards: gpt-oss-20b (24 layers of 32 experts, 8 fake ranks) took
    # 99 CPU-s, 22 times a dense layer's shards; one unit per expert more
    experts = rec.moe_layers * rec.experts if rec is not None else 0
    return limit(work((layers or 1) + experts, a.gpus))
