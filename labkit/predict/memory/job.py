"""The reader's real job per GPU and per node: the ZeRO ledger, the terms
the framework adds, the runtime floor, and the host (pure Python).

    from labkit.predict.memory.job import job
    job(70e9, 8, "zero3", gpu_mem=80e9, framework="deepspeed")["sentence"]
    python -m labkit memory --params 70e9 --gpus 8 --stage 3 \
        --framework deepspeed

:mod:`labkit.predict.memory.states` is the ideal job; this adds what a
run holds on top (:mod:`labkit.predict.memory.frameworks`,
:mod:`labkit.predict.memory.floor`) and answers as a reader acts on it:
"fits with X GB headroom per GPU" or "does not fit", the fewest GPUs or
the offload that fits *with* the floor, and the host RAM each node needs
when states live there (checked against ``host_mem``).
"""
from __future__ import annotations

from labkit.predict.memory.frameworks import terms as framework_terms
from labkit.predict.memory.states import ZERO_STAGE, ledger
from labkit.predict.memory.floor import floor, headroom_sentence

GB = 1e9


def need(params: float, gpus: int, strategy: str, *,
         framework: str = "ledger", sizes: dict | None = None,
         gpus_per_node: int = 8, floor_kw: dict | None = None,
         activations: float = 0.0, **kw) -> dict:
    """Bytes one rank holds on its GPU and its share of the host;
    ``activations``: what the step keeps on top of the states (0: the
    states alone, "activations on top"), inside the allocator's slack."""
    led = ledger(params, gpus, strategy, **kw)
    terms = framework_terms(framework, ledger_strategy=strategy,
                            params=params, gpus=gpus,
                            gpus_per_node=gpus_per_node,
                            offload=kw.get("offload", "none"),
                            precision=kw.get("precision", "mixed"),
                            **(sizes or {}))
    added = [t for t in terms if not t.bound]
    gpu = led.gpu_total + sum(t.gpu for t in added) + activations
    cpu = led.cpu_total + sum(t.cpu for t in added)
    fl = floor(gpus, allocated=gpu, **(floor_kw or {}))
    return {"ledger": led, "terms": terms, "floor": fl,
            "gpu": gpu + fl["total"], "cpu": cpu}


def _fits(n: dict, gpu_mem: float, host_mem: float, ranks: int) -> bool:
    return n["gpu"] <= gpu_mem and n["cpu"] * ranks <= host_mem


def job(params: float, gpus: int, strategy: str = "zero3", *,
        gpu_mem: float, host_mem: float = 2048 * GB,
        gpus_per_node: int = 8, max_gpus: int = 1 << 20, **kw) -> dict:
    """The job's need, its verdict as a sentence, and -- when it does not
    fit -- the fewest GPUs or the offload that fit with the floor."""
    ranks = min(gpus, gpus_per_node)
    n = need(params, gpus, strategy, gpus_per_node=gpus_per_node, **kw)
    host = {"need": n["cpu"] * ranks, "have": host_mem,
            "fits": n["cpu"] * ranks <= host_mem}
    out = {"framework": [t.as_dict() for t in n["terms"]],
           "floor": n["floor"], "gpu_need": n["gpu"], "cpu_need": n["cpu"],
           "host": host, "headroom": gpu_mem - n["gpu"],
           "fits": _fits(n, gpu_mem, host_mem, ranks)}
    sentence = headroom_sentence(n["gpu"], gpu_mem)
    if not host["fits"]:
        sentence = (f"does not fit: the host needs {host['need'] / GB:.0f} "
                    f"GB per node, has {host_mem / GB:g} GB (offload "
                    f"{kw.get('offload', 'none')}); GPU: {sentence}")
    out["sentence"] = sentence
    if out["fits"]:
        return out

    def ok(g: int, **extra) -> bool:
        try:
            m = need(params, g, strategy, gpus_per_node=gpus_per_node,
                     **{**kw, **extra})
        except ValueError:       # more GPUs than parameters, and the like
            return False
        return _fits(m, gpu_mem, host_mem, min(g, gpus_per_node))

    if ZERO_STAGE[strategy] > 0 and kw.get("shard_group") is None:
        hi = min(max_gpus, int(params))
        if ok(hi):               # need falls (weakly) as GPUs are added
            lo = 1
            while lo < hi:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
            out["smallest_gpus"] = lo
            out["smallest_nodes"] = -(-lo // gpus_per_node)
    if kw.get("offload", "none") == "none" and ZERO_STAGE[strategy] > 0:
        for off in ("optimizer", "params"):
            if off == "params" and ZERO_STAGE[strategy] != 3:
                continue
            if ok(gpus, offload=off):
                out["offload_that_fits"] = off
                break
    return out


# what a case meant to fit keeps free beyond the floor: the floor's slack
# is the allocator's steady rounding; this is for what no term names (a
# fragmented segment, the profiler's buffers, NCCL communicators created
# lazily by a later collective), an assumption of 5 % of the GPU
MARGIN = 0.05


def on_gpu(allocated: float, gpus: int, gpu_mem: float, *,
           margin: float = MARGIN, floor_kw: dict | None = None) -> dict:
    """One rank's need on its GPU from the bytes it allocates at its
    peak (predicted by a ledger or counted by a rehearsal): those bytes
    plus the runtime floor (:func:`labkit.predict.memory.floor.floor`).
    It ``fits`` when the headroom left is at least ``margin`` of the
    GPU. Preflight and the rehearsal both judge a case with this."""
    fl = floor(gpus, allocated=allocated, **(floor_kw or {}))
    need = allocated + fl["total"]
    keep = margin * gpu_mem
    return {"allocated": allocated, "floor": fl["total"], "need": need,
            "headroom": gpu_mem - need, "margin": keep,
            "fits": gpu_mem - need >= keep,
            "sentence": headroom_sentence(need, gpu_mem)}
