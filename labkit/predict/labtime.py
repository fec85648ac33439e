"""How long a lab runs under a profile, and what it costs (pure Python).

    python scripts/run_labs.py --profile gpu8 --plan --price-per-hour 24

An estimate per lab from its profile section, built from the course's own
formulas, each assumption named:

* compute: every trained model of the lab (strategies, variants, bucket
  caps, ... times world sizes) runs its steps; one step is the model FLOPs
  of :func:`labkit.predict.model.flops.model_flops` (Narayanan et al. 2021,
  Eq. 3) at ``MFU`` of the GPU's dense bf16 peak (``PEAKS``);
* communication: FULL_SHARD's 3 Phi per step
  (:func:`labkit.predict.sharding.step_comm`, ring alpha-beta at the
  profile's ``link``), an upper bound for the data-parallel strategies;
* start-up: ``LAUNCH_S`` per torchrun launch (interpreters, torch import,
  process group and CUDA/NCCL initialisation), an assumption;
* DeepSpeed ops: ``OP_COMPILE_S`` per op the profile compiles
  (:func:`deepspeed_ops`, the NVMe cell's included), the slowest of the compiles
  measured once on this course's 2-core CPU machine (38-55 s per op).

After a run the runner writes the actual minutes beside the estimate in
``run.json`` (estimate / actual / ratio), so the next plan can be judged.
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.predict.model.flops import PEAKS, model_flops
from labkit.predict.model.params import lab_params
from labkit.predict.sharding import comm_time, step_comm

MFU = 0.35            # assumption: model FLOPs utilisation of a small run
LAUNCH_S = 30.0       # assumption: one torchrun launch's start-up on GPUs
LAUNCH_S_CPU = 8.0    # assumption: the same with gloo on CPU
OP_COMPILE_S = 55.0   # measured once: 38-55 s per DeepSpeed op
GPU = "h100"          # the peak the gpu profiles are written for
RUN_LISTS = ("strategies", "variants", "fsdp", "bucket_caps_mb", "schedules",
             "recompute_strategies", "accumulation_runs",
             "microbatches", "sweep_workers")
SIZE_LISTS = ("world_sizes", "tp_sizes", "stages")


@dataclass
class Estimate:
    lab: str
    launches: int
    runs: int
    compute_s: float
    comm_s: float
    startup_s: float
    compile_s: float

    @property
    def seconds(self) -> float:
        return self.compute_s + self.comm_s + self.startup_s + self.compile_s

    @property
    def minutes(self) -> float:
        return self.seconds / 60


def _shape(section: dict) -> dict | None:
    m = section.get("model")
    if isinstance(m, dict):
        return m
    keys = ("layers", "hidden", "heads", "seq", "vocab")
    if all(k in section for k in ("hidden", "heads", "seq")):
        return {"layers": section.get("layers", 1),
                "vocab": section.get("vocab", 1),
                **{k: section[k] for k in keys if k in section}}
    return None


def estimate(lab: str, section: dict, gpu: bool, compile_ops: int = 0
             ) -> Estimate:
    """The estimate of one lab's section of a profile (see the docstring)."""
    sizes = [v for k in SIZE_LISTS for v in (section.get(k) or [])] or [
        section.get("world_size", 2)]
    runs = max(1, sum(len(section.get(k) or []) for k in RUN_LISTS))
    launches = len(sizes)
    steps = section.get("steps", 3) + 2 * section.get("time_steps", 0) + \
        section.get("timing_steps", 0) + section.get("iters", 0)
    shape = _shape(section)
    compute = comm = 0.0
    if shape and gpu:
        batch = section.get("global_batch") or section.get("batch") or \
            section.get("micro_batch", 1)
        psi = lab_params(shape)
        peak = PEAKS[GPU][0] * 1e12
        for n in sizes:
            flops = model_flops(batch, shape["seq"], shape["layers"],
                                shape["hidden"], shape.get("vocab", 1))
            compute += runs * steps * flops / (n * peak * MFU)
            if n > 1:
                comms = comm_time(step_comm(psi, n, "full_shard",
                                            gpus_per_node=n),
                                  link=section.get("link") or "nvlink4")
                comm += runs * steps * sum(c.seconds for c in comms)
    startup = launches * (LAUNCH_S if gpu else LAUNCH_S_CPU)
    return Estimate(lab, launches, runs, compute, comm, startup,
                    compile_ops * OP_COMPILE_S)


NVME_CELL = ("zero3_nvme",)   # lab 4's optional GPU cell (catches failure)


def variant_ops(name: str) -> list[str]:
    """The DeepSpeed ops one ``labkit.predict.zero`` variant JIT-compiles:
    ``async_io`` for NVMe offload, ``cpu_adam`` for DeepSpeed's optimizer
    over offloaded states. A client ``torch.optim.Adam`` (every variant but
    ``zero3_nvme``) compiles nothing, offload or not."""
    from labkit.predict.zero import VARIANTS
    v = VARIANTS[name]
    offloads = (v.get("offload_optimizer", "none"),
                v.get("offload_param", "none"))
    ops = ["async_io"] if "nvme" in offloads else []
    if v.get("optimizer") == "deepspeed" and set(offloads) != {"none"}:
        ops.append("cpu_adam")
    return ops


def deepspeed_ops(profile: dict, optional: bool = False) -> list[str]:
    """The DeepSpeed ops lab 4 compiles under this profile: those of its
    ``variants`` (the lab stops without them), or with ``optional`` those
    of the NVMe cell, which runs only when ``nvme_path`` is set and reports
    its own failure without stopping the lab."""
    zero = profile.get("zero") or {}
    names = (NVME_CELL if zero.get("nvme_path") else ()) if optional else \
        zero.get("variants", [])
    out = []
    for name in names:
        out += [op for op in variant_ops(name) if op not in out]
    return out


def plan(profile: dict, gpu: bool, labs=None) -> dict[str, Estimate]:
    """The estimate of every lab (or of ``labs``) of a profile."""
    ops = len(set(deepspeed_ops(profile) + deepspeed_ops(profile, True)))
    return {n: estimate(n, profile.get(n) or {}, gpu, ops if n == "zero" else 0)
            for n in (labs or profile)}


def cost(minutes: float, price_per_hour: float | None) -> float | None:
    """Dollars for ``minutes`` of a node at ``price_per_hour``."""
    if price_per_hour is None:
        return None
    if not price_per_hour >= 0:
        raise ValueError(f"price per hour must be >= 0, got {price_per_hour}")
    return minutes / 60 * price_per_hour
