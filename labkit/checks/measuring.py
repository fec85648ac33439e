"""Labs 2, 7 and 8: measuring collectives, profiling a step, checkpoints
and restarts.

Each function takes its lab's parameters by name and raises one
``ValueError``; see :mod:`labkit.checks`.
"""
from __future__ import annotations

from labkit.checks.common import _profile, _sizes
from labkit.checks.rules import require


def collectives(profile, world_sizes, min_bytes, max_bytes, factor, warmup,
                iters, link=None):
    """Lab 2. Returns ``on_gpu``."""
    from labkit.predict import collectives as C

    on_gpu = _profile(profile)
    _sizes(world_sizes, "world sizes", on_gpu)
    require(1 <= min_bytes <= max_bytes, "need 1 <= min_bytes <= max_bytes")
    require(isinstance(factor, int) and factor >= 2, "factor must be >= 2")
    require(iters >= 1 and warmup >= 0, "iters >= 1 and warmup >= 0")
    require(link is None or link in C.LINKS,
            f"unknown link {link!r}: choose from {', '.join(C.LINKS)}")
    return on_gpu


def profiling(profile, world_size, model, batch, delay_ms, workers,
              sweep_workers, sweep_prefetch, wait, warmup, active):
    """Lab 7. Returns ``(backend, config, sweep)``: the DataLoader sweep's
    configuration names."""
    from labkit.launch import pick_backend
    from labkit.nn.model import GPTConfig
    from labkit.runs.profiling import FIXES, configs

    config = GPTConfig(**model)          # ValueError for a bad shape
    on_gpu = _profile(profile)
    backend = pick_backend(world_size, require_gpu=on_gpu)
    require(batch >= 1, f"batch must be >= 1, got {batch}")
    require(delay_ms > 0, f"delay_ms must be > 0, got {delay_ms}")
    require(workers >= 1, f"the data fix needs workers >= 1, got {workers}")
    require(all(isinstance(w, int) and w >= 0 for w in sweep_workers),
            f"sweep_workers must be integers >= 0, got {sweep_workers}")
    require(1 in sweep_workers or not sweep_prefetch,
            "the prefetch sweep runs at num_workers = 1: add 1 to "
            "sweep_workers")
    require(all(isinstance(p, int) and p >= 1 for p in sweep_prefetch),
            f"sweep_prefetch must be integers >= 1, got {sweep_prefetch}")
    require(0 in sweep_workers, "the sweep needs num_workers = 0: it "
            "measures the load time the other points are predicted from")
    require(wait >= 0 and warmup >= 0 and active >= 2,
            "need wait >= 0, warmup >= 0 and active >= 2 profiled steps")
    sweep = [f"w{w}" for w in sweep_workers] + [
        f"w1p{p}" for p in sweep_prefetch if p != 2]
    configs(["slow", *(f"fix_{f}" for f in FIXES), *sweep], workers)
    return backend, config, sweep


def checkpoint(profile, world_size, reshard_world_size, steps, every,
               kill_rank, kill_step, model, global_batch, dataset,
               hang_timeout_s):
    """Lab 8. Returns ``(on_gpu, config)``."""
    from labkit.launch import pick_backend
    from labkit.nn.model import GPTConfig, check_shardable

    config = GPTConfig(**model)
    on_gpu = _profile(profile)
    require(steps >= 1 and every >= 1, "steps and every must be >= 1")
    require(every <= kill_step < steps, f"kill_step must come after the "
            f"first checkpoint (step {every}) and inside the run "
            f"(< {steps})")
    require(0 <= kill_rank < world_size, f"kill_rank must be a rank of "
            f"{world_size}")
    require(global_batch % world_size == 0 and dataset % global_batch == 0,
            "global_batch must divide by world_size, dataset by "
            "global_batch")
    require(hang_timeout_s > 0, "hang_timeout_s must be positive")
    for n in (world_size, reshard_world_size):
        check_shardable(config, n)
        pick_backend(n, require_gpu=on_gpu)
    return on_gpu, config
