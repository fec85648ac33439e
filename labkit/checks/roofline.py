"""Lab 16 (``roofline``): the sizes measured and the step's model.

    config = check("roofline", globals())          # in labs/16_roofline
    from labkit.checks import roofline
    config = roofline(profile="cpu", model={"layers": 2, "hidden": 192,
                      "heads": 4, "vocab": 256, "seq": 128}, batch=8,
                      dtypes=["fp32", "bf16"], step_dtype="fp32",
                      matmul_sizes=[256, 512, 1024],
                      stream_sizes=[65536, 1048576, 16777216], threads=1,
                      world_size=2, global_tokens=4194304,
                      chips=["a100", "h100", "h200", "mi300x"])

One clear line for the first bad parameter, before anything runs: an
unknown dtype or chip, a step dtype the matmul sweep does not measure,
bf16 asked of a CPU step, a model whose token count equals one of its
widths (the profiler's matmuls are told apart by their widths).
"""
from __future__ import annotations

from labkit.checks.common import _known
from labkit.checks.rules import require

PROFILES = ("cpu", "gpu1", "gpu8")
DTYPES = ("fp32", "bf16")


def roofline(profile, model, batch, dtypes, step_dtype, matmul_sizes,
             stream_sizes, threads, world_size, global_tokens, chips):
    """Lab 16. Returns the step's ``GPTConfig``."""
    from labkit.nn.model import GPTConfig
    from labkit.predict.roofline import CHIPS
    require(profile in PROFILES, f"unknown profile {profile!r}")
    _known(dtypes, DTYPES, "dtype")
    require(step_dtype in dtypes, f"step_dtype {step_dtype!r} must be "
            f"among the dtypes measured {dtypes}: its peak is the "
            "prediction's")
    require(profile != "cpu" or step_dtype == "fp32", "step_dtype must be "
            "'fp32' on the CPU profile (bf16 training runs on a GPU)")
    _known(chips, sorted(CHIPS), "chip")
    require(len(matmul_sizes) > 0 and len(stream_sizes) > 0,
            "matmul_sizes and stream_sizes need a size each at least")
    config = GPTConfig(**model)          # ValueError for a bad shape
    h, v = config.hidden, config.vocab
    widths = {h, 3 * h, config.mlp_ratio * h}
    require(v not in widths, f"vocab {v} equals a width of the model "
            f"{sorted(widths)}: the profiler's matmuls could not be told "
            "apart")
    tokens = batch * config.seq
    require(tokens not in widths | {v}, f"batch x seq = {tokens} equals "
            f"a width {sorted(widths | {v})}: choose another batch")
    require(world_size <= 8, f"world_size {world_size}: the link is "
            "measured with 1 (none) to 8 ranks")
    if world_size > 1:
        from labkit.launch import pick_backend
        pick_backend(world_size, require_gpu=profile != "cpu")
    require(threads >= 1, f"threads must be >= 1, got {threads}")
    require(global_tokens >= 1, "global_tokens must be >= 1")
    return config
