"""Lab 19 (``optimizers``): the optimizers, Muon's modes and the model.

    on_gpu = check("optimizers", globals())       # in labs/19_optimizers
    from labkit.checks import optimizers
    on_gpu = optimizers(profile="cpu", world_size=2, steps=8, batch=8,
                        layers=2, hidden=64, heads=4, seq=32, vocab=256,
                        optimizers=["adamw", "muon"],
                        muon_modes=["gather"], timeout_s=300)

One clear line for the first bad parameter, before any process starts:
an unknown optimizer or Muon mode, a world size or batch that does not
divide the model's rows or the global batch (FSDP2's shards must be
equal for the ledger to count them to the byte), too few steps to draw
a loss curve.
"""
from __future__ import annotations

from labkit.checks.common import _known
from labkit.checks.rules import require

PROFILES = ("cpu", "gpu1", "gpu8")


def optimizers(profile, world_size, steps, batch, layers, hidden, heads,
               seq, vocab, optimizers, muon_modes, timeout_s, reference=True):
    """Lab 19. Returns ``on_gpu``."""
    from labkit.nn.model import GPTConfig, check_shardable
    from labkit.predict.optimizers import MUON_MODES, OPTIMIZERS
    require(profile in PROFILES, f"unknown profile {profile!r}")
    require(isinstance(world_size, int) and world_size >= 2,
            f"world_size must be an integer >= 2 (a shard is a part), got "
            f"{world_size!r}")
    require(isinstance(steps, int) and steps >= 2,
            f"steps must be >= 2 (a loss curve), got {steps!r}")
    require(isinstance(optimizers, list) and optimizers,
            f"optimizers must be a non-empty list, got {optimizers!r}")
    _known(optimizers, OPTIMIZERS, "optimizer")
    require(isinstance(muon_modes, list),
            f"muon_modes must be a list, got {muon_modes!r}")
    _known(muon_modes, MUON_MODES, "Muon mode")
    require(batch % world_size == 0, f"global batch {batch} does not "
            f"divide by world_size {world_size}")
    require(isinstance(timeout_s, (int, float)) and timeout_s > 0,
            f"timeout_s must be a number > 0, got {timeout_s!r}")
    try:
        check_shardable(GPTConfig(vocab=vocab, seq=seq, layers=layers,
                                  hidden=hidden, heads=heads), world_size)
    except ValueError as e:
        require(False, str(e))
    on_gpu = profile != "cpu"
    from labkit.launch import pick_backend
    pick_backend(world_size, require_gpu=on_gpu)
    return on_gpu
