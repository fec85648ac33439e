"""Checkpoints: bytes per rank, time to write, and how often (pure Python).

    from labkit.predict import checkpoint as C
    C.checkpoint_bytes(7e9, 8, "zero3")            # bytes each rank writes
    C.young_interval(write_s=60, mtbf_s=3 * 3600)  # seconds between saves

What a checkpoint holds is the model-state ledger of chapter 1
(:func:`labkit.predict.memory.ledger`) without the gradients -- a step
starts by overwriting them -- plus a few small items (the step, the data
loader's position, the RNG states, the LR schedule), which this module
leaves to the measurement to name. Who writes which bytes follows from
what each strategy keeps:

    DDP / full state dict   rank 0 writes everything, the others nothing
    ZeRO-1 / ZeRO-2         rank 0 the weights, every rank 1/N of the
                            optimizer states (DeepSpeed's layout)
    ZeRO-3 / FSDP sharded   every rank 1/N of weights and optimizer states

How often to save: a failure loses the work since the last checkpoint,
half an interval on average, and every checkpoint costs its write time.
Young (1974), "A first order approximation to the optimum checkpoint
interval", CACM 17(9): the interval that minimises the sum is
sqrt(2 * write time * MTBF). Daly (2006), "A higher order estimate of the
optimum checkpoint interval for restart dumps", FGCS 22(3), gives the
perturbation series used by :func:`daly_interval`; its Figs. 3-5 print
worked values the tests hold this module to.
"""
from __future__ import annotations

import math

from labkit.predict.memory import ZERO_STAGE, bytes_per_param, ledger

STATE_DICTS = ("sharded", "full")
ENGINES = ("deepspeed", "fsdp")


def saved_bytes_per_param(precision: str = "mixed", optimizer: str = "adam",
                          engine: str = "deepspeed") -> tuple[float, float]:
    """(weight bytes, optimizer-state bytes) a checkpoint keeps per parameter.

    DeepSpeed (and the ZeRO paper's ledger, Sec. 3.1) keeps 16-bit weights
    plus K bytes of optimizer states *including* an fp32 master copy: 2 +
    12 = 14 under mixed-precision Adam. FSDP (FSDP2's ``MixedPrecisionPolicy``,
    FSDP1's ``MixedPrecision``) keeps its sharded weights in fp32 and casts
    them to 16 bits for compute only: the fp32 weights *are* the master
    copy, so it saves 4 + (K - 4) = 12 (torch/distributed/fsdp/
    _fully_shard/_fsdp_api.py, ``MixedPrecisionPolicy``: "FSDP ... keeps
    the high-precision sharded parameters in memory anyway").
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    b = bytes_per_param(precision, optimizer)
    if engine == "fsdp" and precision == "mixed":
        return 4.0, b.optimizer - 4.0
    return b.params, b.optimizer


def checkpoint_bytes(params: float, world_size: int = 1,
                     strategy: str = "zero3", precision: str = "mixed",
                     optimizer: str = "adam",
                     state_dict: str = "sharded",
                     engine: str = "deepspeed") -> list[float]:
    """Model-state bytes each rank writes, rank 0 first.

    ``state_dict="full"`` is FSDP's full state dict (or any strategy saved
    with ``torch.save`` on rank 0): gathered to rank 0, written once.
    Weights and optimizer states come from the ledger (ZeRO paper Sec. 3.1:
    mixed-precision Adam keeps 2 bytes of weights and K = 12 of optimizer
    states per parameter; fp32 Adam 4 + 8); gradients are not saved.
    ``engine="fsdp"`` counts FSDP's fp32 weights without a separate master
    copy (:func:`saved_bytes_per_param`).
    """
    if state_dict not in STATE_DICTS:
        raise ValueError(f"state_dict must be one of {STATE_DICTS}, got "
                         f"{state_dict!r}")
    if strategy == "hybrid_shard":
        raise ValueError("hybrid_shard replicates across groups: give the "
                         "shard group as world_size and strategy zero3")
    w, opt = saved_bytes_per_param(precision, optimizer, engine)
    led = ledger(params, world_size, strategy, precision, optimizer)
    stage = ZERO_STAGE[strategy]
    if engine == "fsdp" and stage in (1, 2):
        raise ValueError(f"{strategy}: FSDP has no ZeRO-1/2 layout; use "
                         "full_shard / zero3 or a full state dict")
    if state_dict == "full" or stage == 0:
        return [led.params * (w + opt)] + [0.0] * (world_size - 1)
    if stage in (1, 2):
        rest = [led.optimizer_gpu] * world_size
        rest[0] += led.params * w
        return rest
    if engine == "fsdp":
        return [led.params * (w + opt) / world_size] * world_size
    return [led.params_gpu + led.optimizer_gpu] * world_size


def write_seconds(rank_bytes: list[float], bandwidth: float,
                  shared: bool = True) -> float:
    """Seconds to write a checkpoint at ``bandwidth`` bytes/s.

    ``shared=True``: one file system whose aggregate bandwidth the ranks
    share, so the total counts. ``shared=False``: every rank writes to its
    own disk at that bandwidth, so the largest rank counts (a full state
    dict on rank 0 gains nothing from more disks).
    """
    if not bandwidth > 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth!r}")
    if any(b < 0 for b in rank_bytes) or not rank_bytes:
        raise ValueError("rank_bytes must be non-negative, one per rank")
    return (sum(rank_bytes) if shared else max(rank_bytes)) / bandwidth


def job_mtbf(component_mtbf_s: float, components: int) -> float:
    """MTBF of a job that stops when any of ``components`` fails.

    Independent failures at exponential times (Poisson, as Young and Daly
    assume): the rates add, so the job's MTBF is the component's / count.
    """
    if not component_mtbf_s > 0 or components < 1:
        raise ValueError("component MTBF must be positive and components >= 1")
    return component_mtbf_s / components


def young_interval(write_s: float, mtbf_s: float) -> float:
    """Young (1974): compute time between checkpoints, sqrt(2 delta M)."""
    _check(write_s, mtbf_s)
    return math.sqrt(2.0 * write_s * mtbf_s)


def daly_interval(write_s: float, mtbf_s: float) -> float:
    """Daly (2006), higher order: for delta < 2M,
    sqrt(2 delta M) [1 + (delta/2M)^(1/2) / 3 + (delta/2M) / 9] - delta,
    and M otherwise (Daly 2006, Sec. 4, the perturbation solution)."""
    _check(write_s, mtbf_s)
    if write_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = write_s / (2.0 * mtbf_s)
    return (math.sqrt(2.0 * write_s * mtbf_s)
            * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - write_s)


def lost_fraction(interval_s: float, write_s: float, mtbf_s: float,
                  restart_s: float = 0.0) -> float:
    """Fraction of the wall time not spent on new training (first order).

    Per interval tau of training, the checkpoint costs delta; a failure,
    every M seconds on average, costs the restart R plus the work since the
    last checkpoint, (tau + delta) / 2 on average (Young 1974's model):
    delta / (tau + delta) + (R + (tau + delta) / 2) / M.
    At Young's interval this is about sqrt(2 delta / M) when R = 0.
    """
    _check(write_s, mtbf_s)
    if not interval_s > 0 or restart_s < 0:
        raise ValueError("interval must be positive and restart >= 0")
    period = interval_s + write_s
    return write_s / period + (restart_s + period / 2.0) / mtbf_s


def lost_steps(killed_at_step: int, checkpoint_step: int) -> int:
    """Steps done after the last checkpoint and before a failure: redone."""
    if killed_at_step < checkpoint_step:
        raise ValueError("the failure comes after the checkpoint it resumes")
    return killed_at_step - checkpoint_step


def _check(write_s: float, mtbf_s: float) -> None:
    if not write_s > 0 or not mtbf_s > 0:
        raise ValueError(f"write time and MTBF must be positive, got "
                         f"{write_s!r} and {mtbf_s!r}")
