"""How long a lab runs under a profile, and what it costs (pure Python).

    python scripts/run_labs.py --profile cpu --plan
    python scripts/run_labs.py --profile gpu8 --plan --price-per-hour 24

A lab's time is the sum of what it does (:mod:`.labs` reads it from the
profile section): a Jupyter kernel and its imports; each launch's
start-up (torchrun, the ranks' interpreters and torch, on a GPU the CUDA
context and NCCL's communicator, and the first use of what a bare launch
never imports: FSDP, Dynamo and the optimizer's first step in a launch
that trains, DeepSpeed's engine in one that builds an engine), restarted
when the lab kills a rank on purpose; each launch's work -- every training run's build and wrap (an
FSDP run, a DDP run, a DeepSpeed engine and a Colossal-AI plugin each at
its own measured price), its steps at the step time of
:func:`labkit.predict.roofline.step_time` on the profile's device (this CPU's measured peak and bandwidth; the H100's
data sheet for the gpu profiles) and the communication the step does not
hide; compiles (Inductor, DeepSpeed's ops); planted waits; checkpoint
writes at the disk's rate (on a GPU node; the CPU profile's few MB are
nothing); and the kernel's own work (model builds, lab 1's ledger
checks, lab 16's measurements).

The prices (:mod:`.machine`): on the CPU profile every one measured on
this machine by ``scripts/bench_labtime.py`` (``cpu.json``); on a GPU
node named defaults, each a low-high range with its source, so the plan
prints a range, adds the node's set-up, and names its largest
uncertainty. ``tests/test_predict_labtime.py`` holds the CPU plan to the
labs' measured seconds in the same table; after a run, each lab's
``run.json`` holds the estimate beside the actual minutes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from labkit.predict import roofline as R
from labkit.predict.labtime import machine as M
from labkit.predict.labtime.labs import Work, per_rank, work
from labkit.predict.model.params import lab_params
from labkit.predict.sharding import comm_time, step_comm

PARTS = ("start-up", "work", "compile", "waits")


@dataclass
class Estimate:
    """One lab's parts, each ``(low, high)`` seconds (equal on the CPU)."""
    lab: str
    launches: int
    runs: int
    parts: dict = field(default_factory=dict)

    @property
    def low(self) -> float:
        return sum(lo for lo, _ in self.parts.values())

    @property
    def high(self) -> float:
        return sum(hi for _, hi in self.parts.values())

    @property
    def seconds(self) -> float:
        return (self.low + self.high) / 2

    @property
    def minutes(self) -> float:
        return self.seconds / 60


def _step_s(shape, batch, peak, bw, e, eff=1.0, comm=None) -> float:
    if not shape or not batch:
        return 0.0
    ops = R.step_ops(batch, shape["seq"], shape.get("layers", 1),
                     shape["hidden"], shape.get("heads", 1),
                     shape.get("vocab", 256), e=e)
    return R.step_time(ops, peak, bw, comm=comm, efficiency={
        "matmul": eff, "attention": eff})["step_s"]


def roofline_work(p: dict, peak: float, bf16: float, bw: float) -> float:
    """Lab 16's own measurements (``labkit.measure.roofline``), priced on
    the roofline they measure: each matmul and streaming add ``repeats``
    + 1 times, the step ``2 + 2 steps`` times (warm-up, timed, profiled),
    the step's four matmul shapes ``repeats`` + 1 times."""
    reps = p.get("repeats", 5) + 1
    rate = {"fp32": peak, "bf16": bf16}
    mm = sum(reps * 2.0 * n ** 3 / rate.get(d, peak)
             for d in p.get("dtypes") or ["fp32"]
             for n in p.get("matmul_sizes") or [])
    stream = sum(reps * 12.0 * n / bw for n in p.get("stream_sizes") or [])
    m, b = p.get("model") or {}, p.get("batch", 8)
    step = (2 + 2 * p.get("steps", 5)) * _step_s(m, b, peak, bw, 4) \
        if m else 0.0
    cal = sum(reps * 2.0 * b * m["seq"] * m["hidden"] * w / peak
              for w in (m.get("hidden", 0) * k for k in (3, 1, 4))) + \
        reps * 2.0 * b * m["seq"] * m["hidden"] * m["vocab"] / peak \
        if m else 0.0
    return mm + stream + step + cal


def cpu_estimate(name: str, section: dict, const: dict,
                 cores: int) -> Estimate:
    """One lab on this CPU: every part priced by a measured constant."""
    w = work(name, section)
    share = lambda r: max(1.0, r / cores)            # noqa: E731
    # the roofline's terms are CPU time; the measured ones are wall time,
    # with the machine's share of a core in them (bench_labtime.slowdown)
    slow = const.get("slowdown", 1.0)
    start = const["kernel_s"] + w.subprocesses * const["import_s"]
    run = comp = wait = 0.0
    for la in w.launches:
        start += (M.launch_s(const, la.ranks) + share(la.ranks) *
                  M.first_use_s(const, la)) * (1 + la.restarts)
        if la.colossalai:
            start += (const.get("colossalai_import_s") or 0.0) * \
                share(la.ranks)
        step = slow * _step_s(w.shape, la.batch or per_rank(
            section, la.ranks), const["peak_flops"], const["bandwidth"], 4)
        one = slow * _step_s(w.shape, 1, const["peak_flops"],
                             const["bandwidth"], 4)
        # a run: FSDP's (run_s), DDP's, or a Colossal-AI plugin's
        each = const.get("colossalai_run_s") or const["run_s"] \
            if la.colossalai else const["run_s"]
        run += share(la.ranks) * (
            (la.runs - la.ddp) * each + la.ddp * const.get(
                "ddp_run_s", each) + la.deepspeed *
            const["deepspeed_run_s"] + (la.runs + la.deepspeed) *
            la.steps * step + la.builds * const["build_s"] +
            la.sequences * one + slow * la.flops / const["peak_flops"])
        # rank 0 alone, the others waiting: a core of its own
        run += const.get(la.rank0, 0.0)
        # a run's build is in run_s: ``values`` are priced on a GPU only
        # the benchmark's compiling launch, less the bare launch above
        comp += max(0.0, const["compile_s"] - M.launch_s(
            const, la.ranks)) if la.compile else 0.0
        wait += la.wait_s
    run += w.builds * const["build_s"] + w.ledgers * const.get(
        "ledger_s", const["build_s"])
    if w.roofline:
        run += slow * roofline_work(w.roofline, const["peak_flops"],
                                    const["bf16_flops"], const["bandwidth"])
    return _estimate(name, w, {"start-up": start, "work": run,
                               "compile": comp, "waits": wait})


def gpu_estimate(name: str, section: dict, ops: int = 0) -> Estimate:
    """One lab on an 8-GPU node: the named defaults at both ends."""
    w = work(name, section)
    peak, bw = R.chip(M.GPU)
    out = {}
    for end in (0, 1):
        start = M.KERNEL_S[end]
        run = wait = 0.0
        comp = ops * M.OP_COMPILE_S[end]
        for la in w.launches:
            start += (M.LAUNCH_S[end] + M.CUDA_INIT_S[end] +
                      M.NCCL_INIT_S[end] + M.FIRST_USE_S[end] * (
                          la.trains or la.stack)) * (1 + la.restarts)
            wait += la.wait_s
            comp += M.COMPILE_S[end] if la.compile else 0.0
            run += la.values / M.HOST_INIT_VALUES_S[end] + la.flops / (
                M.GPU_FP32_FLOPS * M.MATMUL_EFFICIENCY[end])
            if not w.shape or not (la.runs + la.deepspeed + la.builds):
                continue
            psi = lab_params(w.shape)
            comm = None
            if la.ranks > 1:
                c = comm_time(step_comm(psi, la.ranks, "full_shard",
                                        gpus_per_node=la.ranks),
                              link=section.get("link") or "nvlink4")
                comm = {ph: sum(x.seconds for x in c if x.phase == ph)
                        for ph in ("forward", "backward")}
            step = _step_s(w.shape, la.batch or per_rank(section, la.ranks),
                           peak, bw, 2, M.MATMUL_EFFICIENCY[end], comm)
            one = _step_s(w.shape, 1, peak, bw, 2,
                          M.MATMUL_EFFICIENCY[end])
            run += (la.runs + la.deepspeed + la.builds) * \
                psi / M.HOST_INIT_VALUES_S[end] + \
                (la.runs + la.deepspeed) * la.steps * step + \
                la.sequences * one
        if w.roofline:
            run += roofline_work(w.roofline, peak * M.MATMUL_EFFICIENCY[
                end], peak * M.MATMUL_EFFICIENCY[end], bw)
        if w.checkpoints and w.shape:   # fp32 weights and Adam's m, v
            run += w.checkpoints * 12 * lab_params(w.shape) / \
                M.DISK_BYTES_S[end]
        out[end] = {"start-up": start, "work": run, "compile": comp,
                    "waits": wait}
    return Estimate(name, len(w.launches), _runs(w),
                    {k: (out[0][k], out[1][k]) for k in PARTS})


def _runs(w: Work) -> int:
    return sum(la.runs + la.deepspeed for la in w.launches)


def _estimate(name, w, parts) -> Estimate:
    return Estimate(name, len(w.launches), _runs(w),
                    {k: (v, v) for k, v in parts.items()})


def plan(profile: dict, gpu: bool, labs=None, table: dict | None = None
         ) -> dict[str, Estimate]:
    """The estimate of every lab (or of ``labs``) of a profile; a CPU
    plan prices with ``table`` (default: the benchmark's ``cpu.json``)."""
    if gpu:
        ops = len(set(deepspeed_ops(profile) + deepspeed_ops(profile,
                                                              True)))
        return {n: gpu_estimate(n, profile.get(n) or {},
                                ops if n == "zero" else 0)
                for n in (labs or profile)}
    t = table or M.measured()
    return {n: cpu_estimate(n, profile.get(n) or {}, t["constants"],
                            t["cores"]) for n in (labs or profile)}


def setup(gpu: bool) -> tuple[float, float]:
    """The node's set-up, (low, high) seconds: none on the CPU profile
    (``make test`` sets it up once, outside the labs' time)."""
    return M.SETUP_S if gpu else (0.0, 0.0)


def largest_uncertainty(est: dict[str, Estimate], gpu: bool) -> str:
    """The part whose low-high spread, summed over the labs, is widest."""
    spread = {k: sum(e.parts[k][1] - e.parts[k][0] for e in est.values())
              for k in PARTS}
    lo, hi = setup(gpu)
    spread["set-up"] = hi - lo
    return max(spread, key=spread.get)


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


def cost(minutes: float, price_per_hour: float | None) -> float | None:
    """Dollars for ``minutes`` of a node at ``price_per_hour``."""
    if price_per_hour is None:
        return None
    if not price_per_hour >= 0:
        raise ValueError(f"price per hour must be >= 0, got {price_per_hour}")
    return minutes / 60 * price_per_hour
