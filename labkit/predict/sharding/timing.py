"""How long a step's collectives take, and whether compute hides them.

    from labkit.predict.sharding.timing import overlap
    overlap(7e9, 8, "full_shard", tokens_per_gpu=16384)["exposed_s"]

:func:`comm_time` prices each collective of
:func:`labkit.predict.sharding.traffic.step_comm` with the ring alpha-beta
model of :mod:`labkit.predict.collectives`; :func:`overlap` sets them
against the compute of the step, 6 N FLOPs per token (Kaplan et al. 2020,
"Scaling Laws for Neural Language Models", Sec. 2.1), phase by phase,
with the course's one step-time model
(:func:`labkit.predict.roofline.step_time`). Pure Python.
"""
from __future__ import annotations

from labkit.predict import roofline as R
from labkit.predict.collectives import collective_time, get_link
from labkit.predict.sharding.traffic import Comm, step_comm
from labkit.predict.sharding.names import _positive


GPU_PEAK_FLOPS = {  # dense 16-bit tensor-core peak, vendor datasheets
    "v100": 125e12, "a100": 312e12, "h100": 989e12, "b200": 2250e12}


def comm_time(comms: list[Comm], link="nvlink4", inter_link="ib-ndr",
              efficiency: float = 1.0) -> list[Comm]:
    """Fill ``seconds`` of each Comm with the ring alpha-beta model.

    A group inside a node runs at ``link``; a group that spans nodes runs at
    the slower ``inter_link`` (one NIC per GPU, as in DGX/HGX nodes).
    Each Comm is priced as one collective of its whole size (a lower bound:
    per-unit calls add one alpha term each).
    """
    lk, ilk = get_link(link), get_link(inter_link)
    for c in comms:
        c.seconds = collective_time(c.op, c.nbytes, c.group_size,
                                    lk if c.scope == "intra" else ilk,
                                    efficiency)
    return comms


def overlap(params: float, gpus: int, strategy: str, tokens_per_gpu: float,
            peak_flops: float = GPU_PEAK_FLOPS["h100"], mfu: float = 0.4,
            link="nvlink4", inter_link="ib-ndr", efficiency: float = 1.0,
            bandwidth: float | None = None, **kw) -> dict:
    """Can the step's communication hide behind its compute?

    Compute per rank: 6 * params * tokens FLOPs (Kaplan et al. 2020,
    "Scaling Laws for Neural Language Models", Sec. 2.1: 2 N per token
    forward, 4 N backward) at ``mfu`` of the GPU's peak, as three matmul
    passes on the roofline (:func:`labkit.predict.roofline.step_time`:
    each pass also reads the weights once from memory at ``bandwidth``,
    default the H100's HBM, which binds below a few hundred tokens). Forward
    all-gathers overlap the forward (FSDP's prefetch), backward all-gathers,
    reduce-scatters and all-reduces overlap the backward (DDP's buckets,
    FSDP's backward prefetch); ZeRO-1/2's all-gather after the optimizer
    step does not overlap. Exposed time per phase = max(0, comm - compute).
    """
    _positive(tokens_per_gpu=tokens_per_gpu, peak_flops=peak_flops)
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu must be in (0, 1], got {mfu}")
    comms = comm_time(step_comm(params, gpus, strategy, **kw), link,
                      inter_link, efficiency)
    comm = {p: sum(c.seconds for c in comms if c.phase == p)
            for p in ("forward", "backward", "step")}
    # forward, input gradient, weight gradient: 2 N T FLOPs each
    ops = [R.Op("model matmuls", "matmul", 2.0 * params * tokens_per_gpu,
                kw.get("param_bytes", 2) * params, 3)]
    t = R.step_time(ops, peak_flops, bandwidth or R.chip("h100")[1],
                    comm=comm, efficiency={"matmul": mfu})
    total_comm, total_exposed = t["comm_s"], t["exposed_s"]
    return {"compute_s": t["compute_s"], "comm_s": total_comm,
            "exposed_s": total_exposed, "step_s": t["step_s"],
            "hidden_fraction": (1 - total_exposed / total_comm
                                if total_comm else 1.0),
            "scaling_efficiency": t["compute_s"] / t["step_s"],
            "by_phase": t["by_phase"]}
