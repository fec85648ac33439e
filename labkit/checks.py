"""The labs' parameter checks: one function per lab, run before any process.

    from labkit.lab import check
    backend, config = check("memory", globals())   # in lab 1, after its
                                                   # parameters cell

Each function takes the lab's parameters by name (the names of its
``parameters`` cell; :func:`labkit.lab.check` picks them from the
notebook's namespace) and raises ``ValueError`` with one clear message for
the first bad one -- a world size the machine cannot run, a batch or a
model that does not divide, an unknown strategy -- so a lab stops before it
launches anything. It returns what the lab needs next (the backend, the
model's config). The lab pages keep the lesson; the checks live here, where
tests call them with bad parameters (tests/test_checks.py).
"""
from __future__ import annotations

from labkit.lab import require

PROFILES = ("cpu", "gpu1", "gpu8")


def _profile(profile) -> bool:
    """True on a GPU profile."""
    require(profile in PROFILES, f"unknown profile {profile!r}")
    return profile != "cpu"


def _sizes(sizes, what: str, on_gpu: bool) -> int:
    """World sizes (``what``) as integers >= 2, and on a GPU profile as
    many visible GPUs as the largest; returns the largest."""
    from labkit.launch import cuda_device_count
    require(len(sizes) > 0 and all(isinstance(n, int) and n >= 2
                                   for n in sizes),
            f"{what} must be integers >= 2, got {sizes!r}")
    world = max(sizes)
    require(not on_gpu or world <= cuda_device_count(),
            f"{world} ranks need as many GPUs; {cuda_device_count()} are "
            "visible")
    return world


def memory(profile, world_sizes, strategies, model, global_batch, steps,
           fit_to_gpu=False):
    """Lab 1. Returns ``(backend, config, model)``; ``fit_to_gpu`` trims the
    model's layers to what the GPU's memory holds (ledger + activations)."""
    from labkit.launch import pick_backend
    from labkit.model import GPTConfig, check_shardable
    from labkit.wrap import check_strategy

    config = GPTConfig(**model)
    if fit_to_gpu:   # read the GPU's memory now; ledger + activations fit
        import torch
        from labkit.device import name, total_memory
        from labkit.predict.memory import layers_that_fit
        require(torch.cuda.is_available(), "fit_to_gpu needs a CUDA GPU")
        gpu = torch.device("cuda", 0)
        fit = layers_that_fit(total_memory(gpu), config.layers,
                              config.hidden, config.heads, config.vocab,
                              config.seq, global_batch // min(world_sizes))
        require(fit > 0, f"{name(gpu)} ({total_memory(gpu) / 1e9:.0f} GB): "
                f"not one layer of hidden {config.hidden}, seq {config.seq},"
                f" batch {global_batch} fits; lower hidden, seq or "
                "global_batch")
        if fit < config.layers:
            print(f"{name(gpu)}: {config.layers} layers do not fit in "
                  f"{total_memory(gpu) / 1e9:.0f} GB; training {fit}")
            model = {**model, "layers": fit}
            config = GPTConfig(**model)
    on_gpu = _profile(profile)
    require(steps >= 1, "steps must be >= 1")
    backend = None
    for n in world_sizes:
        backend = pick_backend(n, require_gpu=on_gpu)
        require(global_batch % n == 0,
                f"global batch {global_batch} does not divide by world size "
                f"{n}")
        check_shardable(config, n)
        for s in strategies:
            check_strategy(s, n)
    return backend, config, model


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


def sharding(profile, world_size, shard_group, strategies, bucket_caps_mb,
             model, global_batch, steps, time_steps, link):
    """Lab 3. Returns ``(backend, config)``."""
    from labkit.launch import pick_backend
    from labkit.model import GPTConfig
    from labkit.predict import collectives as C
    from labkit.wrap import check_strategy

    config = GPTConfig(**model)
    on_gpu = _profile(profile)
    require(steps >= 3, "steps must be >= 3: DDP's third step is its first "
            "steady one")
    require(time_steps >= 0, "time_steps must be >= 0")
    require(len(strategies) > 0, "no strategy to run")
    backend = pick_backend(world_size, require_gpu=on_gpu)
    require(global_batch % world_size == 0,
            f"global batch {global_batch} does not divide by world size "
            f"{world_size}")
    for s in strategies:
        check_strategy(s, world_size, shard_group)
    require(all(c > 0 for c in bucket_caps_mb),
            "bucket caps must be > 0 MiB")
    require(link in C.LINKS, f"unknown link {link!r}")
    return backend, config


def zero(profile, world_size, model, steps, global_batch, variants, fsdp,
         reduce_bucket_size):
    """Lab 4. Returns ``(backend, config)``."""
    from labkit.launch import pick_backend
    from labkit.model import GPTConfig
    from labkit.wrap import check_strategy
    from labkit.zero_config import VARIANTS, variant

    config = GPTConfig(**model)
    on_gpu = _profile(profile)
    require(isinstance(world_size, int) and world_size >= 1,
            f"world size must be an integer >= 1, got {world_size!r}")
    backend = pick_backend(world_size, require_gpu=on_gpu)
    require(steps >= 2, "steps must be >= 2 (the last one is measured)")
    require(global_batch % world_size == 0,
            f"global batch {global_batch} does not divide by world size "
            f"{world_size}")
    for v in variants:
        require(v in VARIANTS, f"unknown DeepSpeed variant {v!r}; known: "
                f"{', '.join(VARIANTS)}")
        require(v != "zero3_nvme",
                "zero3_nvme runs in its own GPU cell below")
        variant(v, world_size=world_size)    # validates the combination
    for s in fsdp:
        check_strategy(s, world_size)
    require(reduce_bucket_size >= 1, "reduce_bucket_size must be >= 1")
    return backend, config


def tensor_parallel(profile, tp_sizes, hidden, heads, seq, micro_batch,
                    dtype, timing_steps):
    """Lab 5. Returns ``on_gpu``."""

    on_gpu = _profile(profile)
    _sizes(tp_sizes, "tensor-parallel sizes", on_gpu)
    require(hidden % heads == 0,
            f"hidden {hidden} must divide by heads {heads}")
    require(all(heads % t == 0 for t in tp_sizes),
            f"every tensor-parallel size must divide the {heads} heads")
    require(dtype in ("fp32", "bf16"), f"unknown dtype {dtype!r}")
    require(min(seq, micro_batch) >= 1 and timing_steps >= 0,
            "seq and micro_batch >= 1, timing_steps >= 0")
    return on_gpu


def pipeline_parallel(profile, stages, sweep_stages, schedules, chunks,
                      microbatches, check_microbatches, layers, hidden,
                      heads, dtype, steps, repeats):
    """Lab 6. Returns ``(on_gpu, world)``: the most ranks one run uses."""
    from labkit.predict import pipeline_parallel as PP

    on_gpu = _profile(profile)
    world = _sizes(stages, "pipeline depths", on_gpu)
    require(set(schedules) <= set(PP.SCHEDULES) and schedules,
            f"schedules must be among {PP.SCHEDULES}, got {schedules}")
    require(set(sweep_stages) <= set(stages),
            "sweep_stages must be in stages")
    require(chunks >= 2 or "interleaved" not in schedules,
            "the interleaved schedule needs chunks >= 2")
    for p in stages:
        for s in schedules:
            v = chunks if s == "interleaved" else 1
            require(layers % (p * v) == 0,
                    f"{layers} layers do not split into {p * v} stages "
                    f"({s}, p={p})")
        require(check_microbatches % p == 0,
                f"check_microbatches ({check_microbatches}) must be a "
                f"multiple of every depth ({p})")
    for p in sweep_stages:
        require(any(m >= p and m % p == 0 for m in microbatches),
                f"no micro-batch count in {microbatches} fits depth {p}")
    require(hidden % heads == 0,
            f"hidden {hidden} must divide by heads {heads}")
    require(dtype in ("fp32", "bf16"), f"unknown dtype {dtype!r}")
    require(steps >= 1 and repeats >= 1, "steps and repeats must be >= 1")
    return on_gpu, world


def profiling(profile, world_size, model, batch, delay_ms, workers,
              sweep_workers, sweep_prefetch, wait, warmup, active):
    """Lab 7. Returns ``(backend, config, sweep)``: the DataLoader sweep's
    configuration names."""
    from labkit.launch import pick_backend
    from labkit.model import GPTConfig
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
    from labkit.model import GPTConfig, check_shardable

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


def colossalai(profile, world_size, plugins, model, global_batch, steps,
               compare):
    """Lab 9. Returns ``(backend, config, python)``: the interpreter of
    Colossal-AI's own environment."""
    from labkit.launch import ROOT, pick_backend
    from labkit.model import GPTConfig, check_shardable
    from labkit.runs.colossalai_patches import NEEDS

    config = GPTConfig(**model)
    on_gpu = _profile(profile)
    require(isinstance(world_size, int) and world_size >= 1,
            f"world size must be an integer >= 1, got {world_size!r}")
    backend = pick_backend(world_size, require_gpu=on_gpu)
    for p in plugins + compare:
        require(p in NEEDS,
                f"unknown plugin {p!r}; known: {', '.join(NEEDS)}")
    require("gemini" not in plugins, "GeminiPlugin goes in `compare`: its "
            "bytes live in chunks that state_bytes does not count")
    require(profile != "cpu" or not compare,
            "GeminiPlugin needs CUDA: `compare` runs on the gpu8 profile "
            "only")
    require(steps >= 2, "steps must be >= 2 (Adam's states exist after one)")
    require(global_batch % world_size == 0,
            f"global batch {global_batch} does not divide by world size "
            f"{world_size}")
    check_shardable(config, world_size)     # exact shards: bytes = Psi / N
    python = ROOT / ".venv-colossalai" / "bin" / "python"
    require(python.exists(), f"no {python}: run `make colossalai` first")
    return backend, config, python


def mesh(profile, world_size, layouts, model, global_batch):
    """Lab 10. Returns ``(on_gpu, config, layouts)``: the parsed layouts
    (``{"dp", "tp", "sp", "name"}`` each)."""
    from labkit.launch import pick_backend
    from labkit.model import GPTConfig
    from labkit.runs.mesh import parse_layout

    on_gpu = _profile(profile)
    require(isinstance(world_size, int) and world_size >= 2,
            f"world_size must be an integer >= 2, got {world_size!r}")
    pick_backend(world_size, require_gpu=on_gpu)
    config = GPTConfig(**model)             # checks the shape
    lays = [parse_layout(s, world_size) for s in layouts]   # DxT = N
    for lay in lays:
        require(config.heads % lay["tp"] == 0
                and config.hidden % lay["tp"] == 0,
                f"{lay['name']}: heads and hidden must divide by tp")
        require(global_batch % lay["dp"] == 0,
                f"{lay['name']}: global_batch must divide by dp")
        require(not lay["sp"] or config.seq % lay["tp"] == 0,
                f"{lay['name']}: seq must divide by tp for sequence "
                "parallelism")
        sizes = [config.vocab, config.seq, config.hidden]
        require(all(s % lay["dp"] == 0 for s in sizes),
                f"{lay['name']}: vocab, seq and hidden must divide by dp "
                "(exact FSDP shards)")
    return on_gpu, config, lays


def context_parallel(profile, world_sizes, batch, seq, heads, head_dim):
    """Lab 11. Returns ``on_gpu``."""
    on_gpu = _profile(profile)
    _sizes(world_sizes, "world_sizes", on_gpu)
    for p in world_sizes:
        require(seq % (2 * p) == 0, f"seq {seq} must divide by 2 x {p}")
        require(heads % p == 0, f"heads {heads} must divide by {p} (Ulysses)")
    require(all(isinstance(x, int) and x >= 1 for x in (batch, head_dim)),
            "batch and head_dim must be positive integers")
    return on_gpu


def fit(profile, world_size, model, global_batch, budget_bytes, steps):
    """Lab 12. Returns ``(backend, config)``."""
    from labkit.launch import pick_backend
    from labkit.model import GPTConfig, check_shardable

    on_gpu = _profile(profile)
    config = GPTConfig(**model)
    backend = pick_backend(world_size, require_gpu=on_gpu)
    require(global_batch % world_size == 0,
            f"global batch {global_batch} does not divide by {world_size}")
    check_shardable(config, world_size)
    require(budget_bytes > 0, "budget_bytes must be positive")
    require(steps >= 2, "steps must be >= 2 (the first step warms up)")
    return backend, config
