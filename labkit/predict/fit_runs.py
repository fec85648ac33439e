"""Lab 12's runs on a GPU, one record each: the bytes a rank allocates at
its peak, and the host RAM a node needs to build them (pure Python).

    from labkit.predict.fit_runs import runs, host_bytes
    for r in runs(load_profile("gpu8")["fit"]):
        print(r.variant, r.allocated["total"], r.expect_oom)
    host_bytes(load_profile("gpu8")["fit"])["total"]

The runs are the ones the notebook starts: the planner's choice
(:func:`labkit.predict.fit.choose`, its ``train`` part), each
``accumulation_runs`` entry (at ``accumulation_micro_batch`` when the
profile sets one: FSDP2 without gradient sync holds the unsharded fp32
gradients, 4 Psi, beside the activations) and the ``gpu`` cell's DDP
(:data:`OOM_CELL`), which must run out of memory. Preflight
(:mod:`labkit.preflight.memory`) and the dry run the rehearsal judges
(:mod:`labkit.dryrun.fit_lab`) read this one list, and judge a run's
bytes with the same :func:`labkit.predict.memory.job.on_gpu` (its bytes
plus the runtime floor, and a margin).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from labkit.predict import fit as F
from labkit.predict.memory import ledger
from labkit.predict.sharding.accumulation import unsharded_grad_bytes

# the notebook's gpu cell: DDP really tried, micro-batch 1, one step
# (labs/12_fit.ipynb, "CUDA only: DDP really tried, its OOM caught")
OOM_CELL = F.Config("ddp", "none", 1, 1)
# what a torch process holds on the host besides the model: its libraries
# (torch, cuBLAS, cuDNN, NCCL) mapped and resident, the CUDA driver's
# pinned staging; an assumption, read yours as VmRSS in /proc/PID/status
PROCESS_HOST_BYTES = 3e9


@dataclass(frozen=True)
class Run:
    variant: str
    cfg: F.Config
    allocated: dict = field(compare=False)   # terms and "total", bytes
    accumulation_run: str = ""   # labkit.runs.blocks.accumulation's name
    micro_batches: int = 1
    expect_oom: bool = False


def _precision(p: dict) -> tuple[str, str]:
    return ("fsdp_bf16" if p.get("bf16") else "fp32",
            "cuda" if p.get("profile", "cpu") != "cpu" else "cpu")


def chosen(p: dict) -> F.Config:
    """The planner's choice for lab 12's parameters ``p``."""
    precision, where = _precision(p)
    if p["flops_per_s"] == "measured":
        raise ValueError("lab 12's flops_per_s is 'measured': this CPU's "
                         "rate (labkit.measure.roofline.planner_rate) must "
                         "be measured before the plan can choose")
    best = F.choose(F.plan(p["model"], p["world_size"], p["global_batch"],
                           p["budget_bytes"], p["flops_per_s"],
                           p["link_bytes_per_s"], precision, where))
    return F.Config(best["strategy"], best["recompute"],
                    best["micro_batch"], best["accumulation"])


def _allocated(p: dict, cfg: F.Config, held: int | None = None) -> dict:
    precision, where = _precision(p)
    world = p["world_size"]
    mem = F.per_rank_bytes(p["model"], world, cfg, precision, where)
    led = ledger(mem["params"], world, F.ZERO[cfg.strategy],
                 precision="fp32")
    out = {"params": led.params_gpu, "grads": led.grads_gpu,
           "optimizer": led.optimizer_gpu,
           "activations": mem["activations"],
           "transient": mem["transient"], "states": mem["states"],
           "total": mem["total"]}
    if held is not None:   # unsharded grads beside the sharded ones
        out["held_grads"] = held
        out["total"] += held - led.grads_gpu
    return out


def runs(p: dict) -> list[Run]:
    """Every run of lab 12 that holds the model on a GPU (module doc)."""
    best = chosen(p)
    out = [Run(f"chosen: {best.strategy} recompute={best.recompute} "
               f"mb={best.micro_batch}", best, _allocated(p, best))]
    mb = p.get("accumulation_micro_batch") or best.micro_batch
    k = max(best.accumulation, 2)    # as the notebook launches it
    acc = F.Config(best.strategy, best.recompute, mb, k)
    units = F.units(p["model"])
    for run in p.get("accumulation_runs", []):
        if run == "ddp":     # not dry-run on fake ranks (fit_lab)
            continue
        no_sync = run.endswith("no_sync")
        held = unsharded_grad_bytes(units, p["world_size"], acc.strategy,
                                    k, no_sync)
        out.append(Run(f"accumulation: {run} k={k} "
                       f"recompute={acc.recompute} mb={mb}", acc,
                       _allocated(p, acc, held), run, k))
    if p.get("over_budget"):
        out.insert(0, Run(f"over budget: {OOM_CELL.strategy}", OOM_CELL,
                          _allocated(p, OOM_CELL), expect_oom=True))
    return out


def host_bytes(p: dict, ranks_per_node: int = 8,
               build: str = "meta") -> dict:
    """Host RAM of one node while lab 12's ranks build their model.

    ``build="meta"`` (:func:`labkit.training.meta_init.built`): each rank
    builds on the meta device, shards, and materialises its shard on its
    GPU, so no parameter lives on the host; ``"host"``: each rank builds
    the whole fp32 model on the CPU first (4 bytes a parameter) and all
    ranks of the node do it at once. Per rank: that plus the process
    (:data:`PROCESS_HOST_BYTES`); times the node's ranks."""
    if build not in ("meta", "host"):
        raise ValueError(f"build: 'meta' or 'host', got {build!r}")
    ranks = min(p.get("world_size", 1), ranks_per_node)
    model = 0 if build == "meta" else 4 * F.per_rank_bytes(
        p["model"], 1, OOM_CELL)["params"]
    per_rank = model + PROCESS_HOST_BYTES
    return {"ranks": ranks, "model_per_rank": model,
            "process_per_rank": PROCESS_HOST_BYTES,
            "per_rank": per_rank, "total": per_rank * ranks}
