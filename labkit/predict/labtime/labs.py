"""What each lab does, read from its profile section: its launches (ranks,
training runs, DeepSpeed engines, steps, restarts, planted waits) and
the work its notebook's kernel does itself (model builds, a subprocess,
lab 16's measurements). The same description serves every profile; the
machine (:mod:`labkit.predict.labtime.machine`) prices it.

Each function follows its notebook's launch cells (``labs/NN_NAME.ipynb``)
and the loops of the run module they start; a lab not listed here is one
launch of ``world_size`` ranks and one run (:func:`generic`).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Launch:
    """One ``labkit.launch.launch``: ``ranks`` processes, each building and
    training ``runs`` models (``deepspeed`` of them DeepSpeed engines) for
    ``steps`` steps of ``shape``'s model at ``batch`` sequences per rank."""
    ranks: int
    runs: int = 0
    deepspeed: int = 0
    ddp: int = 0               # of ``runs``, DDP runs (priced apart)
    steps: int = 0
    builds: int = 0            # plain model builds in each rank
    sequences: int = 0         # sequences each rank trains, beyond runs'
    #                            steps (a pipeline's micro-batches)
    restarts: int = 0          # torchrun starts the group again
    wait_s: float = 0.0        # a planted hang's process-group timeout
    colossalai: bool = False   # .venv-colossalai's interpreter
    compile: bool = False      # torch.compile's warm-up in the ranks
    batch: int = 0             # sequences a rank's step trains, when
    #                            not the section's (per_rank)
    flops: float = 0.0         # fp32 FLOPs each rank computes outside
    #                            a GPT step (lab 18's Linear blocks)
    values: int = 0            # values each rank initialises for a
    #                            model not of ``shape`` (lab 18's)
    rank0: str = ""            # a measured constant: one process's
    #                            work rank 0 does while the others wait
    stack: bool = False        # uses torch.distributed's tensor stack
    #                            (functional collectives, Dynamo) with
    #                            no training run (lab 2's counter check)

    @property
    def trains(self) -> bool:
        """It builds and trains a model: its first run pays the lazy
        imports a bare launch never meets (FSDP, Dynamo, the optimizer's
        first step), priced once per started group."""
        return bool(self.runs or self.deepspeed or self.builds or
                    self.sequences)


@dataclass
class Work:
    launches: list = field(default_factory=list)
    builds: int = 0            # model builds + one step in the kernel
    ledgers: int = 0           # lab 1's ledger checks in the kernel: a
    #                            build, its forward's storages measured,
    #                            the record's ledger beside
    subprocesses: int = 0      # ``python -m labkit ...`` from a cell
    shape: dict | None = None  # the trained model (layers, hidden, ...)
    checkpoints: int = 0       # full checkpoints written (weights, Adam)
    roofline: dict | None = None   # lab 16's section: its measurements


def _n(p, key, default=0):
    v = p.get(key)
    return len(v) if isinstance(v, (list, tuple)) else (v or default)


def shape_of(p: dict) -> dict | None:
    m = p.get("model")
    if isinstance(m, dict):
        return m
    if all(k in p for k in ("hidden", "heads", "seq")):
        return {"layers": p.get("layers", 1), "vocab": p.get("vocab", 256),
                **{k: p[k] for k in ("hidden", "heads", "seq")}}
    return None


def per_rank(p: dict, ranks: int) -> int:
    """Sequences a rank's step trains on."""
    b = p.get("global_batch") or p.get("batch") or p.get("micro_batch", 1)
    return max(1, b // ranks) if p.get("global_batch") else b


def memory(p):
    from labkit.predict.activations import PRECISIONS, RECOMPUTE
    sizes = p.get("world_sizes") or [2]
    mbs = {p.get("global_batch", 8) // n for n in sizes}
    gpu = p.get("profile", "cpu") != "cpu"
    # cell 23: each micro-batch x precision (one on a GPU) x recompute;
    # cell 29: the other block, every precision, on the CPU
    ledger = len(mbs) * len(RECOMPUTE) * (
        (1 if gpu else len(PRECISIONS)) + len(PRECISIONS))
    return Work([Launch(n, _n(p, "strategies"), steps=p.get("steps", 3))
                 for n in sizes],
                builds=bool(p.get("reference")), ledgers=ledger)


def sharding(p):
    ws = p.get("world_size", 4)
    # every strategy, then DDP once per bucket cap (runs/sharding.py)
    runs = _n(p, "strategies") + _n(p, "bucket_caps_mb")
    ddp = (p.get("strategies") or []).count("ddp") + _n(p, "bucket_caps_mb")
    return Work([Launch(ws, runs, ddp=ddp, steps=p.get("steps", 3)
                        + p.get("time_steps", 0))],
                builds=p.get("profile", "cpu") == "cpu")


def zero(p):
    ws = p.get("world_size", 2)
    cpu = p.get("profile", "cpu") == "cpu"
    # DeepSpeed's variants; FSDP's, torch's ZeRO-1 and the reference
    out = [Launch(ws, _n(p, "fsdp") + 1 + cpu, _n(p, "variants"),
                  steps=p.get("steps", 3) + p.get("time_steps", 0))]
    if not cpu and p.get("nvme_path"):
        out.append(Launch(ws, 0, 1, steps=p.get("steps", 3)))
    return Work(out)


def tensor_parallel(p):
    # 4 variants of the GPT block, 2-3 of the Llama-style block per size
    llama = 3 if "llama" in (p.get("archs") or []) else 0
    return Work([Launch(t, 4 + llama, steps=p.get("timing_steps", 0))
                 for t in p.get("tp_sizes") or [2]],
                builds=1, subprocesses=1)


def pipeline_parallel(p):
    """runs/pipeline_parallel.py: per depth and schedule a fresh model
    trains ``steps`` steps of ``check_microbatches``; at the sweep's
    depths each micro-batch count runs ``1 + repeats`` times; a rank
    holds 1/p of the layers. Rank 0 also trains the one-process
    reference."""
    stages = p.get("stages") or [2]
    sched = _n(p, "schedules", 1)
    mb, steps = p.get("micro_batch", 1), p.get("steps", 3)
    seqs = sum(sched * steps * p.get("check_microbatches", 4) * mb // d
               for d in stages)
    seqs += sum(sched * (1 + p.get("repeats", 1)) * m * mb // d
                for d in p.get("sweep_stages") or []
                for m in p.get("microbatches") or [] if m >= d and m % d == 0)
    seqs += steps * p.get("check_microbatches", 4) * mb
    return Work([Launch(max(stages), builds=len(stages) * sched + 1,
                        sequences=seqs)])


def profiling(p):
    ws = p.get("world_size", 2)
    steps = p.get("wait", 1) + p.get("warmup", 1) + p.get("active", 3)
    fixes = 3      # labkit.runs.profiling.FIXES: data, buckets, sync
    sweep = _n(p, "sweep_workers") + _n(p, "sweep_prefetch")
    return Work([Launch(ws, 1, steps=steps),
                 Launch(ws, fixes + sweep, steps=steps)])


def checkpoint(p):
    ws = p.get("world_size", 4)
    # killed once and resumed (max_restarts 1), with its reference run;
    # the reshard; the planted hang, ended by its own timeout. Both runs
    # save every ``every`` steps; the resumed one from the last before
    # the kill.
    steps, every = p.get("steps", 6), max(1, p.get("every", 2))
    saves = 2 * (steps // every) - p.get("kill_step", 0) // every
    return Work([Launch(ws, 2, restarts=1, steps=p.get("steps", 6)),
                 Launch(p.get("reshard_world_size", 2), 1),
                 Launch(p.get("hang_world_size", 2),
                        wait_s=p.get("hang_timeout_s", 3.0))],
                checkpoints=saves)


def colossalai(p):
    """Two launches in ``.venv-colossalai``: every plugin in one
    (``labkit.runs.colossalai``), then, with ``hybrid``, every hybrid
    plugin in another (``labkit.runs.cai.hybrid``), each plugin a run."""
    ws = p.get("world_size", 2)
    steps = p.get("steps", 3) + p.get("time_steps", 0)
    hybrid = _n(p, "hybrid")
    return Work([Launch(ws, _n(p, "plugins"), steps=steps, colossalai=True)]
                + ([Launch(ws, hybrid, steps=p.get("steps", 3),
                           colossalai=True)] if hybrid else []))


def context_parallel(p):
    sizes = p.get("world_sizes") or [2]
    out = [Launch(n, 2, steps=p.get("time_steps", 0)) for n in sizes]
    if p.get("kv_heads"):
        out.append(Launch(max(sizes), 3))
    return Work(out)


def fit(p):
    ws = p.get("world_size", 2)
    runs = 2 * _n(p, "recompute_strategies") + _n(p, "accumulation_runs") \
        + 1
    return Work([Launch(ws, runs, _n(p, "deepspeed_stages"),
                        steps=p.get("steps", 2) * p.get("repeats", 1)),
                 Launch(ws, 1, steps=p.get("compile_steps", 3),
                        compile=True)])


def experts(p):
    return Work([Launch(p.get("world_size", 4),
                        1 + _n(p, "capacity_factors"),
                        steps=p.get("steps", 3))])


def precision(p):
    """runs/precision.py: rank 0's one-process part first (the formats'
    errors, fp16 zeros, the grad scaler, accumulation over k, FP8's
    errors: ``precision_local_s``, measured whole), then the ranks' runs
    and, with ``deepspeed``, one engine."""
    return Work([Launch(p.get("world_size", 4), _n(p, "formats", 1),
                        int(bool(p.get("deepspeed"))),
                        steps=p.get("scaler_steps", 0),
                        rank0="precision_local_s")])


def roofline(p):
    ws = p.get("world_size", 2)
    # the link's alpha-beta: a short all-gather sweep (labkit.runs.
    # collectives, whose counter check meets the tensor stack)
    return Work([Launch(ws, stack=True)] if ws > 1 else [], roofline=p)


def hangs(p):
    from labkit.predict.hangs import DETAIL_FAULTS, HANG_FAULTS
    faults = p.get("faults") or []
    ws, wait = p.get("world_size", 3), p.get("hang_timeout_s", 2.0)
    # runs/hangs.py: a short loop of plain collectives, no model
    return Work([Launch(ws) for f in faults if f in DETAIL_FAULTS]
                + [Launch(ws, wait_s=wait) for f in faults
                   if f in HANG_FAULTS])


def schedules(p):
    """runs/schedules/run.py: each rank builds the whole model of
    ``layers`` Linear(h, h) blocks and computes its gradients on the
    step's ``m`` micro-batches in one process (the reference), then per
    schedule builds it again, cuts its stages and runs ``1 + repeats``
    steps, a rank's stages holding 1/p of the blocks. A block's forward
    is one matmul, its backward two: 6 FLOPs per row and weight."""
    p_, sched = p.get("world_size", 2), _n(p, "schedules", 1)
    h, layers = p.get("hidden", 64), p.get("layers", 8)
    step = 6.0 * p.get("pp_microbatches", 4) * p.get("micro_batch", 8) * \
        h * h * layers
    return Work([Launch(p_, sched, flops=step * (
        1 + sched * (1 + p.get("repeats", 2)) / p_),
        values=(1 + sched) * layers * (h * h + h))])


def optimizers(p):
    """runs/optimizers: every optimizer, then Muon once per way to its
    matrices, each a fresh FSDP2 run of ``steps`` steps on the global
    ``batch`` split over the ranks; with ``reference`` rank 0 first
    trains Muon in one process on the whole batch. (Newton-Schulz's
    FLOPs, a few ms a step at these sizes, are not priced.)"""
    ws, steps, b = p.get("world_size", 2), p.get("steps", 8), \
        p.get("batch", 8)
    ref = bool(p.get("reference"))
    return Work([Launch(ws, _n(p, "optimizers") + _n(p, "muon_modes"),
                        steps=steps, batch=max(1, b // ws), builds=ref,
                        sequences=ref * steps * b)])


def generic(p):
    sizes = p.get("world_sizes") or [p.get("world_size", 2)]
    return Work([Launch(n, 1, steps=p.get("steps", 3)) for n in sizes])


LABS = {"memory": memory, "sharding": sharding, "zero": zero,
        "tensor_parallel": tensor_parallel,
        "pipeline_parallel": pipeline_parallel, "profiling": profiling,
        "checkpoint": checkpoint, "colossalai": colossalai,
        "context_parallel": context_parallel, "fit": fit,
        "experts": experts, "precision": precision, "roofline": roofline,
        "hangs": hangs, "schedules": schedules, "optimizers": optimizers,
        "collectives": lambda p: Work([Launch(n, stack=True) for n in
                                       p.get("world_sizes") or [2]]),
        "mesh": lambda p: Work([Launch(p.get("world_size", 4),
                                       _n(p, "layouts", 1),
                                       steps=p.get("steps", 3))])}


def work(name: str, section: dict) -> Work:
    """What lab ``name`` does under its profile ``section``."""
    w = LABS.get(name, generic)(section)
    w.shape = shape_of(section)
    return w
