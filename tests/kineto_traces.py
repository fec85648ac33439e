"""Small synthetic Kineto traces for the breakdown tests, in microseconds.

Each builder returns the JSON of one rank's trace as ``torch.profiler``
writes it (``ProfilerStep#N`` annotations, ``cudaLaunchKernel`` events and
kernels linked by ``correlation``), in the layout HolisticTraceAnalysis
reads: ``distributedInfo.rank`` in a ``rank-N.json`` file.
"""
import json
import random

GEMM = "void gemm_kernel<float>()"
ELEM = "void elementwise_kernel<float>()"
NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
COPY = "Memcpy DtoH (Device -> Pageable)"
SET = "Memset (Device)"


def ev(name, ts, dur, cat="cpu_op", tid=1, pid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
            "ts": ts, "dur": dur, "args": args}


def kineto(steps, kernels, extra=()):
    """``steps``: (N, start, duration) of the CPU's ProfilerStep ranges;
    ``kernels``: (name, start, duration, stream, launched at)."""
    events = [ev(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")
              for n, ts, dur in steps]
    for i, (name, ts, dur, stream, launch) in enumerate(kernels, 1):
        cat = {"Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}.get(
            name[:6], "kernel")
        events.append(ev("cudaLaunchKernel", launch, 1, cat="cuda_runtime",
                         correlation=i))
        events.append(ev(name, ts, dur, cat=cat, pid=0, tid=stream,
                         stream=stream, correlation=i, device=0))
    return events + list(extra)


def write(folder, rank, events):
    folder.mkdir(parents=True, exist_ok=True)
    f = folder / f"rank-{rank}.json"
    f.write_text(json.dumps({"distributedInfo": {"rank": rank},
                             "traceEvents": events}))
    return f


def lagging_gpu():
    """The GPU runs 900 us behind its CPU: step N's kernels run while the
    CPU is already in step N+1. Steps of 1000 us; each launches a gemm and
    an elementwise kernel that run [base+900, base+1700)."""
    steps = [(n, 1000 * (n - 1), 1000) for n in (1, 2, 3, 4)]
    kernels = []
    for n, base, _ in steps:
        kernels += [(GEMM, base + 900, 500, 7, base + 10),
                    (ELEM, base + 1400, 300, 7, base + 20)]
    return kineto(steps, kernels)


def streams_overlapping():
    """Compute on three streams at once, a memset, a gap."""
    steps = [(1, 0, 90), (2, 90, 510)]
    kernels = [(GEMM, 100, 200, 7, 10), (GEMM, 150, 100, 20, 11),
               (ELEM, 280, 120, 24, 12), (SET, 400, 10, 7, 13),
               (GEMM, 420, 80, 7, 14),
               (GEMM, 550, 50, 7, 95)]        # the last step's
    return kineto(steps, kernels)


def comm_under_compute():
    """An all-reduce partly under compute, an exposed copy; two steps."""
    steps = [(1, 0, 100), (2, 100, 100), (3, 200, 100)]
    kernels = []
    for n, base in ((1, 0), (2, 400), (3, 800)):
        at = 100 * (n - 1)
        kernels += [(GEMM, base + 100, 100, 7, at + 1),
                    (NCCL, base + 150, 150, 20, at + 2),
                    (ELEM, base + 250, 20, 7, at + 3),
                    (COPY, base + 300, 20, 7, at + 4),
                    (GEMM, base + 330, 70, 7, at + 5)]
    return kineto(steps, kernels)


def trailing_incomplete_step():
    """The last step's kernels run long past everything else: left out."""
    steps = [(5, 0, 100), (6, 100, 100), (7, 200, 20)]
    kernels = [(GEMM, 50, 80, 7, 10), (NCCL, 140, 40, 20, 20),
               (GEMM, 150, 100, 7, 110), (ELEM, 260, 30, 7, 120),
               (GEMM, 300, 10_000, 7, 205), (NCCL, 310, 5_000, 20, 210)]
    return kineto(steps, kernels)


def step_without_kernels():
    """Step 2 launches nothing (the CPU evaluates, say); a kernel launched
    before the first step still counts in the total."""
    steps = [(1, 100, 100), (2, 200, 100), (3, 300, 100), (4, 400, 100)]
    kernels = [(SET, 60, 5, 7, 50),            # before ProfilerStep#1
               (GEMM, 150, 60, 7, 110), (GEMM, 400, 60, 7, 310),
               (GEMM, 500, 60, 7, 410)]
    return kineto(steps, kernels)


def nanoseconds():
    """Fractional time stamps and sub-microsecond kernels: HTA rounds every
    event to [ceil(ts), floor(ts + dur)), so a 0.4 us memset alone counts
    -1 us."""
    steps = [(1, 0.5, 99.25), (2, 99.75, 100.5), (3, 200.25, 50.0)]
    kernels = [(GEMM, 100.25, 50.5, 7, 10.125), (SET, 160.3, 0.4, 7, 11.5),
               (ELEM, 170.6, 0.3, 7, 12.25), (GEMM, 180.2, 20.1, 20, 13.5),
               (NCCL, 190.7, 30.6, 24, 14.75), (GEMM, 230.5, 0.7, 7, 110.5),
               (GEMM, 240.0, 9.99, 7, 120.2), (GEMM, 260.1, 5.0, 7, 210.0)]
    return kineto(steps, kernels)


def random_trace(seed):
    """Many kernels of every class on three streams, a GPU lagging by a
    random amount, fractional times: HTA's rules on a trace no rule was
    written for."""
    rng = random.Random(seed)
    steps, kernels, t_cpu, t_gpu = [], [], 0.0, 300.0
    names = [GEMM, GEMM, ELEM, NCCL, COPY, SET, "void foo_Memset_kernel()"]
    for n in range(1, 6):
        dur = rng.uniform(300, 600)
        steps.append((n, round(t_cpu, 3), round(dur, 3)))
        ends = {7: t_gpu, 20: t_gpu, 24: t_gpu}
        for _ in range(rng.randint(0, 12)):
            stream = rng.choice(list(ends))
            ts = ends[stream] + rng.choice([0, 0, rng.uniform(0, 40)])
            d = rng.choice([rng.uniform(0.2, 0.9), rng.uniform(1, 80)])
            kernels.append((rng.choice(names), round(ts, 3), round(d, 3),
                            stream, round(t_cpu + rng.uniform(0, dur), 3)))
            ends[stream] = ts + d
        t_cpu += dur
        t_gpu = max(t_gpu, min(ends.values())) + rng.uniform(0, 200)
    return kineto(steps, kernels)


SCENARIOS = {
    "lagging_gpu": lagging_gpu, "streams_overlapping": streams_overlapping,
    "comm_under_compute": comm_under_compute,
    "trailing_incomplete_step": trailing_incomplete_step,
    "step_without_kernels": step_without_kernels,
    "nanoseconds": nanoseconds,
    **{f"random_{s}": (lambda s=s: random_trace(s)) for s in range(4)},
}


def one_rank_nccl(calls=3):
    """One rank under NCCL (lab 7 on gpu1): each step calls all_reduce
    ``calls`` times (the CPU's ``nccl:all_reduce`` annotations) but NCCL
    launches no kernel for an in-place sum on one rank; compute kernels
    only. Three steps of 1000 us."""
    steps = [(n, 1000 * (n - 1), 1000) for n in (1, 2, 3)]
    kernels, extra = [], []
    for n, base, _ in steps:
        kernels += [(GEMM, base + 100, 300, 7, base + 10),
                    (ELEM, base + 500, 100, 7, base + 20)]
        extra += [ev("nccl:all_reduce", base + 30 + 10 * i, 5,
                     cat="user_annotation") for i in range(calls)]
    return kineto(steps, kernels, extra)
