"""Lab 14 (``precision``): the formats, the FP8 mode and the sizes.

    on_gpu = check("precision", globals())        # in labs/14_precision
    from labkit.checks import precision
    on_gpu = precision(profile="cpu", world_size=4, ks=[1, 4, 16, 32],
                       formats=["bf16", "fp16", "fp32"], fp8="emulated",
                       preset="llama-tiny", hidden=256, ffn=768,
                       micro_batch=4, block=128)

One clear line for the first bad parameter, before any process starts:
an unknown precision, FP8 asked where it cannot run (and what runs
instead), a k <= 0, a ranks backend that is not gloo or nccl (or nccl
with fewer GPUs than ranks), a model whose widths do not split into the
FP8 blocks or over the ranks.
"""
from __future__ import annotations

from labkit.checks.common import _known
from labkit.checks.rules import require

PROFILES = ("cpu", "gpu1", "gpu8")
FORMATS = ("fp32", "bf16", "fp16")
FP8_MODES = ("emulated", "scaled_mm")
RANKS_BACKENDS = (None, "gloo", "nccl")


def fp8_unavailable() -> str | None:
    """Why ``torch._scaled_mm`` (a real FP8 GEMM) cannot run here, or None;
    under a rehearsal, on the described node's GPU (labkit.rehearse)."""
    from labkit.rehearse.node import rehearsed
    node = rehearsed()
    if node:
        return None if node.fp8 else (f"{node.gpu} (rehearsed): FP8 tensor "
                                      "cores start at sm_89 (L4, H100)")
    import torch
    if not torch.cuda.is_available():
        return ("no CUDA GPU: FP8 GEMMs need FP8 tensor cores (H100/H200, "
                "L4, sm_89+)")
    cap = torch.cuda.get_device_capability(0)
    if cap < (8, 9):
        return (f"{torch.cuda.get_device_name(0)} is sm_{cap[0]}{cap[1]}: "
                "FP8 tensor cores start at sm_89 (L4, H100)")
    if not hasattr(torch, "_scaled_mm"):
        return f"torch {torch.__version__} has no torch._scaled_mm"
    return None


def precision(profile, world_size, ks, formats, fp8, preset, hidden, ffn,
              micro_batch, block=128, ranks_backend=None):
    """Lab 14. Returns ``on_gpu``."""
    require(profile in PROFILES, f"unknown profile {profile!r}")
    on_gpu = profile != "cpu"
    _known(formats, FORMATS, "precision", " (FP8 is the fp8 parameter)")
    require(fp8 in FP8_MODES, f"unknown fp8 mode {fp8!r}: 'emulated' "
            "(scaled casts, fp32 matmul; runs anywhere) or 'scaled_mm' "
            "(a real FP8 GEMM)")
    if fp8 == "scaled_mm":
        why = fp8_unavailable()
        require(why is None, f"fp8='scaled_mm' cannot run here ({why}); "
                "fp8='emulated' runs the same scaled casts with an fp32 "
                "matmul instead")
    require(len(ks) > 0 and all(isinstance(k, int) and not
                                isinstance(k, bool) for k in ks),
            f"ks must be a list of integers, got {ks!r}")
    require(min(ks) > 0, f"k must be >= 1 (micro-batches accumulated), "
            f"got {min(ks)}")
    require(isinstance(world_size, int) and world_size in (2, 4),
            f"world_size must be 2 or 4 (the all-reduce compares 2 and 4 "
            f"ranks), got {world_size!r}")
    require(ranks_backend in RANKS_BACKENDS, f"unknown ranks_backend "
            f"{ranks_backend!r}: None (nccl with one GPU per rank, else "
            "gloo) or 'gloo' (CPU processes: NCCL needs a GPU per rank)")
    from labkit.launch import pick_backend
    pick_backend(world_size, backend=ranks_backend,
                 require_gpu=on_gpu and ranks_backend != "gloo")
    require(isinstance(block, int) and block >= 1,
            f"block must be a positive integer, got {block!r}")
    for name, v in (("hidden", hidden), ("ffn", ffn)):
        require(isinstance(v, int) and v > 0 and v % block == 0,
                f"model {name} {v} must be a positive multiple of the FP8 "
                f"block {block} (1x{block} tiles, {block}x{block} blocks)")
        require(v % world_size == 0, f"model {name} {v} does not divide "
                f"by {world_size} ranks: FSDP shards would be uneven")
    require(isinstance(micro_batch, int) and micro_batch >= 1,
            f"micro_batch must be an integer >= 1, got {micro_batch!r}")
    from labkit import arch
    arch.preset(preset)   # an unknown name: one line, with the names
    return on_gpu
