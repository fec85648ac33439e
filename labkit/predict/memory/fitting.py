"""Does a model's training fit: the fewest GPUs, or the offload that fits.

    from labkit.predict.memory.fitting import smallest_gpus, verdict
    smallest_gpus(70e9, 80e9, "zero3")      # 14: 16 Psi / 14 <= 80 GB
    verdict(70e9, 8, 80e9, "zero3")         # {"fits": False, ...}

Reads only the model states of :func:`labkit.predict.memory.states.ledger`
(ZeRO paper, Rajbhandari et al. 2020, Sec. 3.1 and Fig. 1; offload:
ZeRO-Offload, Ren et al. 2021, Sec. 3, its optimal offload strategy);
activations come on top. The
GPU bytes of a sharded strategy fall (weakly) as the GPU count grows, so
the fewest GPUs is a binary search. Pure Python.
"""
from __future__ import annotations

import math

from labkit.predict.memory.states import ZERO_STAGE, Ledger, ledger


def fits(led: Ledger, gpu_mem_bytes: float) -> bool:
    return led.gpu_total <= gpu_mem_bytes


def smallest_gpus(params: float, gpu_mem_bytes: float, strategy: str = "zero3",
                  max_gpus: int = 1 << 20, **kw) -> int | None:
    """Fewest ranks whose per-rank model states fit (None: no count does)."""
    if ZERO_STAGE[strategy] == 0:
        return 1 if fits(ledger(params, 1, strategy, **kw), gpu_mem_bytes) else None
    lo, hi = 1, max_gpus
    if not fits(ledger(params, min(hi, int(params)), strategy, **kw),
                gpu_mem_bytes):
        return None
    while lo < hi:  # the GPU bytes fall (weakly) as the count grows
        mid = (lo + hi) // 2
        if fits(ledger(params, mid, strategy, **kw), gpu_mem_bytes):
            hi = mid
        else:
            lo = mid + 1
    return lo


def verdict(params: float, gpus: int, gpu_mem_bytes: float,
            strategy: str = "zero3", gpus_per_node: int = 8, **kw) -> dict:
    """Fits or not; if not, the fewest GPUs (and whole nodes) or an offload."""
    led = ledger(params, gpus, strategy, **kw)
    out = {"fits": fits(led, gpu_mem_bytes), "gpu_total": led.gpu_total,
           "gpu_mem": gpu_mem_bytes}
    if not out["fits"]:
        need = smallest_gpus(params, gpu_mem_bytes, strategy, **kw)
        out["smallest_gpus"] = need
        out["smallest_nodes"] = (None if need is None
                                 else math.ceil(need / gpus_per_node))
        if kw.get("offload", "none") == "none" and ZERO_STAGE[strategy] > 0:
            for off in ("optimizer", "params"):
                if off == "params" and ZERO_STAGE[strategy] != 3:
                    continue
                kw2 = {**kw, "offload": off}
                if fits(ledger(params, gpus, strategy, **kw2), gpu_mem_bytes):
                    out["offload_that_fits"] = off
                    break
    return out
