"""Labs 5, 6, 10, 11 and 18: splitting the model (tensor, pipeline, 2-D
mesh, context parallelism, the schedules past 1F1B) -- the sizes must
divide heads, layers and sequences.

Each function takes its lab's parameters by name and raises one
``ValueError``; see :mod:`labkit.checks`.
"""
from __future__ import annotations

from labkit.checks.common import _known, _profile, _sizes
from labkit.checks.rules import require


def tensor_parallel(profile, tp_sizes, hidden, heads, seq, micro_batch,
                    dtype, timing_steps, archs=("gpt",), kv_heads=2):
    """Lab 5. Returns ``on_gpu``. ``archs``: the blocks split -- the GPT's
    (the lesson: its fused QKV, the formulas) and the Llama-style one
    beside it (GQA with ``kv_heads``, SwiGLU)."""
    from labkit.predict.tensor_parallel.gqa import kv_split
    from labkit.runs.tensor_parallel import llama_record

    on_gpu = _profile(profile)
    require(len(archs) > 0 and len(set(archs)) == len(archs),
            f"archs must name each block once, got {archs!r}")
    require("gpt" in archs, "archs must hold 'gpt': lab 5's lesson (the "
            "fused QKV split by heads, the formulas) is on the GPT block; "
            "'llama' runs beside it")
    _sizes(tp_sizes, "tensor-parallel sizes", on_gpu)
    require(hidden % heads == 0,
            f"hidden {hidden} must divide by heads {heads}")
    require(all(heads % t == 0 for t in tp_sizes),
            f"every tensor-parallel size must divide the {heads} heads")
    require(dtype in ("fp32", "bf16"), f"unknown dtype {dtype!r}")
    require(min(seq, micro_batch) >= 1 and timing_steps >= 0,
            "seq and micro_batch >= 1, timing_steps >= 0")
    if "llama" in archs:   # its K/V heads split, or are replicated evenly
        try:
            rec = llama_record(hidden, heads, kv_heads, seq)
            for t in tp_sizes:
                kv_split(rec, t)
        except ValueError as e:
            raise ValueError(f"the Llama-style block: {e}") from None
    return on_gpu


def pipeline_parallel(profile, stages, sweep_stages, schedules, chunks,
                      microbatches, check_microbatches, layers, hidden,
                      heads, dtype, steps, repeats, arch="gpt"):
    """Lab 6. Returns ``(on_gpu, world)``: the most ranks one run uses.
    ``arch``: the stages' blocks (the schedules do not depend on them)."""
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
    if arch == "llama":   # the record at these sizes (RoPE: even head_dim)
        from labkit.predict.model.arch import of_shape
        a = of_shape(layers, hidden, heads, 8, 1, arch=arch)
        require(a.head_dim % 2 == 0, f"arch='llama': RoPE needs an even "
                f"head_dim, got {a.head_dim}")
    require(dtype in ("fp32", "bf16"), f"unknown dtype {dtype!r}")
    require(steps >= 1 and repeats >= 1, "steps and repeats must be >= 1")
    return on_gpu, world


def mesh(profile, world_size, layouts, model, global_batch):
    """Lab 10. Returns ``(on_gpu, config, layouts)``: the parsed layouts
    (``{"dp", "tp", "sp", "name"}`` each). The GPT or the Llama-style
    block (``model['arch']``): TP must split the query heads, and split
    the K/V heads or be a multiple of them (replicas)."""
    from labkit.launch import pick_backend
    from labkit.nn.model import GPTConfig, arch_of
    from labkit.predict.mesh import arch as MA
    from labkit.predict.tensor_parallel.gqa import kv_split
    from labkit.runs.mesh import parse_layout

    on_gpu = _profile(profile)
    require(isinstance(world_size, int) and world_size >= 2,
            f"world_size must be an integer >= 2, got {world_size!r}")
    pick_backend(world_size, require_gpu=on_gpu)
    config = GPTConfig(**model)             # checks the shape
    a = arch_of(config)
    lays = [parse_layout(s, world_size) for s in layouts]   # DxT = N
    for lay in lays:
        require(config.heads % lay["tp"] == 0
                and config.hidden % lay["tp"] == 0,
                f"{lay['name']}: heads and hidden must divide by tp")
        try:
            kv_split(a, lay["tp"])
            MA.unit_shapes(a, lay["tp"])    # FFN width by tp
        except ValueError as e:
            require(False, f"{lay['name']}: {e}")
        require(global_batch % lay["dp"] == 0,
                f"{lay['name']}: global_batch must divide by dp")
        require(not lay["sp"] or config.seq % lay["tp"] == 0,
                f"{lay['name']}: seq must divide by tp for sequence "
                "parallelism")
        require(all(s[0] % lay["dp"] == 0 for u in
                    MA.unit_shapes(a, lay["tp"]) for s in u),
                f"{lay['name']}: every tensor's first dimension on a "
                "TP rank must divide by dp (exact FSDP shards)")
    return on_gpu, config, lays


def context_parallel(profile, world_sizes, batch, seq, heads, head_dim,
                     kv_heads=None):
    """Lab 11. Returns ``on_gpu``."""
    on_gpu = _profile(profile)
    _sizes(world_sizes, "world_sizes", on_gpu)
    for p in world_sizes:
        require(seq % (2 * p) == 0, f"seq {seq} must divide by 2 x {p}")
        require(heads % p == 0, f"heads {heads} must divide by {p} (Ulysses)")
    require(kv_heads is None or heads % kv_heads == 0,
            f"kv_heads {kv_heads} must divide heads {heads} (GQA groups)")
    require(all(isinstance(x, int) and x >= 1 for x in (batch, head_dim)),
            "batch and head_dim must be positive integers")
    return on_gpu


def schedules(profile, world_size, schedules, pp_microbatches, micro_batch,
              layers, hidden, repeats):
    """Lab 18. Returns ``on_gpu``: every schedule runs on ``world_size``
    ranks, the V ones on two stages per rank."""
    from labkit.predict.pipeline_parallel.schedules import (SPLIT,
                                                            V_SHAPE, _check)

    on_gpu = _profile(profile)
    _sizes([world_size], "world_size", on_gpu)
    known = ("1f1b",) + SPLIT
    require(schedules, f"schedules must name one at least: one of "
            f"{', '.join(known)}")
    _known(schedules, known, "schedule")
    require(layers % (2 * world_size) == 0,
            f"{layers} layers do not split into the V's 2 x {world_size} "
            "stages")
    require(isinstance(pp_microbatches, int)
            and pp_microbatches >= world_size,
            f"pp_microbatches={pp_microbatches}: torch's schedules need at "
            f"least one micro-batch per stage ({world_size})")
    for s in schedules:
        try:
            _check(s, world_size, pp_microbatches,
                   2 if s in V_SHAPE else 1)
        except ValueError as e:
            raise ValueError(f"pp_microbatches={pp_microbatches}: "
                             f"{e}") from None
    require(min(micro_batch, hidden, repeats) >= 1,
            "micro_batch, hidden and repeats must be >= 1")
    return on_gpu
