"""Labs 1, 3, 4, 9 and 12: data parallelism (DDP, FSDP, ZeRO, Colossal-AI,
fitting a model) -- the world size must divide the batch and shard the
model.

Each function takes its lab's parameters by name and raises one
``ValueError``; see :mod:`labkit.checks`.
"""
from __future__ import annotations

from labkit.checks.common import _gpt_only, _profile, _sizes
from labkit.checks.rules import require


def memory(profile, world_sizes, strategies, model, global_batch, steps,
           fit_to_gpu=False):
    """Lab 1. Returns ``(backend, config, model)``; ``fit_to_gpu`` trims the
    model's layers to what the GPU's memory holds (ledger + activations)."""
    from labkit.launch import pick_backend
    from labkit.nn.model import GPTConfig, check_shardable
    from labkit.training.wrap import check_strategy

    config = GPTConfig(**model)
    # the Llama block's activation ledger is exact on CPU; fit_to_gpu and
    # the allocator's floor price the GPT block (Korthikanti's 34 sbh)
    require(config.arch == "gpt" or not _profile(profile),
            f"model['arch']={config.arch!r} on the {profile} profile: the "
            "Llama-style block's activation ledger is exact on CPU only, "
            "and fit_to_gpu prices the GPT block; use 'gpt' (the CPU "
            "profile runs 'llama')")
    if fit_to_gpu:   # read the GPU's memory now; ledger + activations fit
        from labkit.predict.memory import layers_that_fit
        gpu, total = _first_gpu()
        fit = layers_that_fit(total, config.layers,
                              config.hidden, config.heads, config.vocab,
                              config.seq, global_batch // min(world_sizes))
        require(fit > 0, f"{gpu} ({total / 1e9:.0f} GB): "
                f"not one layer of hidden {config.hidden}, seq {config.seq},"
                f" batch {global_batch} fits; lower hidden, seq or "
                "global_batch")
        if fit < config.layers:
            print(f"{gpu}: {config.layers} layers do not fit in "
                  f"{total / 1e9:.0f} GB; training {fit}")
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


def _first_gpu() -> tuple[str, float]:
    """The first GPU's name and bytes; under a rehearsal, the described
    node's (labkit.rehearse: gpu1 rehearsed for a T4 fits lab 1 to 16 GB)."""
    from labkit.rehearse.node import rehearsed
    node = rehearsed()
    if node:
        return f"{node.gpu} (rehearsed)", float(node.memory)
    import torch
    from labkit.device import name, total_memory
    require(torch.cuda.is_available(), "fit_to_gpu needs a CUDA GPU")
    gpu = torch.device("cuda", 0)
    return name(gpu), float(total_memory(gpu))


def sharding(profile, world_size, shard_group, strategies, bucket_caps_mb,
             model, global_batch, steps, time_steps, link):
    """Lab 3. Returns ``(backend, config)``."""
    from labkit.launch import pick_backend
    from labkit.nn.model import GPTConfig
    from labkit.predict import collectives as C
    from labkit.training.wrap import check_strategy

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
    from labkit.nn.model import GPTConfig
    from labkit.training.wrap import check_strategy
    from labkit.predict.zero import VARIANTS, variant

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


def colossalai(profile, world_size, plugins, model, global_batch, steps,
               compare):
    """Lab 9. Returns ``(backend, config, python)``: the interpreter of
    Colossal-AI's own environment."""
    from labkit.launch import ROOT, pick_backend
    from labkit.nn.model import GPTConfig, check_shardable
    from labkit.runs.cai.patches import NEEDS

    config = GPTConfig(**model)
    _gpt_only(config, "lab 9's HybridParallelPlugin shards Hugging Face's "
              "GPT-2 (Colossal-AI's policy), the course GPT's shape, and "
              "the plugins are compared on that shape")
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


def fit(profile, world_size, model, global_batch, budget_bytes, steps,
        compile_backend="inductor", compile_steps=3,
        compile_preset="llama-tiny"):
    """Lab 12. Returns ``(backend, config)``."""
    from labkit.launch import pick_backend
    from labkit.nn.model import GPTConfig, check_shardable

    on_gpu = _profile(profile)
    config = GPTConfig(**model)   # gpt or llama: the ledger reads both
    backend = pick_backend(world_size, require_gpu=on_gpu)
    require(global_batch % world_size == 0,
            f"global batch {global_batch} does not divide by {world_size}")
    check_shardable(config, world_size)
    require(budget_bytes > 0, "budget_bytes must be positive")
    require(steps >= 2, "steps must be >= 2 (the first step warms up)")
    require(compile_backend in ("inductor", "aot_eager"),
            f"unknown compile_backend {compile_backend!r}: 'inductor' "
            "(generates kernels) or 'aot_eager' (the graphs, no code)")
    require(compile_steps >= 2, "compile_steps must be >= 2 (the first "
            "compiled step compiles)")
    from labkit import arch
    arch.preset(compile_preset)   # an unknown name: one line, the names
    return backend, config
