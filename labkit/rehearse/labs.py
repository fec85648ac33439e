"""What the rehearsal runs of each lab, at the profile's real sizes.

    plans = lab_plans(load_profile("gpu8"))   # {lab: Plan}
    plans = lab_plans(load_profile("gpu1"), gpu_bytes=describe("t4").memory)

Three kinds, per lab:

- ``launches``: the run module's own ``main`` with the arguments the
  notebook's cell passes (``labkit.launch.as_argv``), every rank of every
  world size, each rank on fake tensors with its GPU as ``meta``
  (:mod:`labkit.rehearse.world`): NCCL's rules per rank and across the
  ranks (:mod:`labkit.rehearse.nccl`), each rank's peak bytes against the
  node's memory. Timing loops are cut to none (a fake time is no time);
- ``cases``: the dry run's adapters (:mod:`labkit.dryrun.labs`): the
  lab's model built and wrapped by its run module, one counted step per
  rank role, its peak against the node's memory; a case the lab expects
  to run out of memory (lab 12's over-budget DDP) must not fit;
- ``listed``: not rehearsed, with the reason.

These are what a lab gets when its notebook is not executed
(``--cells``, :mod:`labkit.rehearse.notebooks`): its cells read what the
ranks measured (losses, differences, timings), which fake ranks cannot
produce, and a fake rank at real size is slow.
"""
from __future__ import annotations

from dataclasses import dataclass, field

CELLS = ("notebook not executed (--cells LAB or all executes it): its "
         "dry-run cases, or its launches with the cells' parameters, are "
         "rehearsed")


@dataclass
class Launch:
    module: str
    world_size: int
    params: dict


@dataclass
class Plan:
    launches: list = field(default_factory=list)
    cases: list = field(default_factory=list)
    listed: str = ""
    expect_oom: tuple = ()     # case variants that must not fit
    notes: list = field(default_factory=list)


def _context_parallel(p: dict) -> Plan:
    """Lab 11's launch cells: one launch per world size, and section 3b's
    grouped-query launch at the largest."""
    shape = {"batch": p["batch"], "seq": p["seq"], "heads": p["heads"],
             "head_dim": p["head_dim"]}
    launches = [Launch("labkit.runs.context_parallel", n, {
        **shape, "time_steps": 0, "torch_cp": True})
        for n in p["world_sizes"]]
    if p.get("kv_heads"):
        n, kv = max(p["world_sizes"]), p["kv_heads"]
        methods = "ring,ring_balanced" + (",ulysses" * (kv % n == 0))
        launches.append(Launch("labkit.runs.context_parallel", n, {
            **shape, "kv_heads": kv, "methods": methods}))
    return Plan(launches=launches,
        notes=[f"time_steps {p.get('time_steps', 0)} -> 0: timings not "
               "rehearsed"])


LAUNCHES = {"context_parallel": _context_parallel}


def fitted(p: dict, gpu_bytes: float | None) -> dict:
    """Lab 1's ``fit_to_gpu``: the layers the described GPU holds, as the
    notebook's check trains them (:mod:`labkit.checks.data_parallel`) and
    preflight prices them. Without it the gpu1 rehearsal for a 16 GB T4
    priced all 24 layers (44.8 GB, an OOM) where the notebook trains 4."""
    if not p.get("fit_to_gpu") or gpu_bytes is None:
        return p
    from labkit.preflight.memory import fitted_layers
    fit = fitted_layers(p, gpu_bytes)
    if fit < 1:      # the notebook refuses; preflight says so
        return p
    return {**p, "model": {**p["model"], "layers": fit}}


def lab_plans(profile: dict, gpu_bytes: float | None = None
              ) -> dict[str, Plan]:
    """``gpu_bytes``: the described GPU's memory (what ``fit_to_gpu``
    reads)."""
    from labkit.dryrun import labs as L
    out = {}
    for name, p in profile.items():
        p = fitted(p or {}, gpu_bytes)
        if name in LAUNCHES:
            out[name] = LAUNCHES[name](p)
        elif name in L.ADAPTERS:
            plan = Plan(cases=L.ADAPTERS[name](p))
            if name == "fit":
                plan.expect_oom = tuple(c.variant for c in plan.cases
                                        if c.variant.startswith("over"))
            if name == "zero":
                plan.notes.append(L.ZERO_DEEPSPEED)
            out[name] = plan
        else:
            out[name] = Plan(listed=L.REASONS.get(
                name, "no rehearsal adapter yet (labkit/rehearse/labs.py)"))
    return out
