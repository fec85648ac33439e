"""This machine's roofline, measured, and one training step's ops timed:
the twin of :mod:`labkit.predict.roofline`.

    from labkit.measure import roofline as M
    M.matmul_rate(1024, "fp32")       # FLOP/s of a 1024^3 matmul, best of
    M.stream_rate(1 << 24)            # bytes/s of out = a + b (3 passes)
    M.call_overhead()                 # seconds one framework call costs
    M.step_times(model, x, y, opt)    # {op name: seconds}, the step's time
    M.step_rate(model, x, y, opt, flops)  # FLOP/s a step reaches, 1 thread
    M.planner_rate(lab_model, batch)  # lab 12's rate: the same, built here

Peak and bandwidth are the best of a few repeats (Williams et al. 2009
measure both with kernels of their own: a dense matmul for the ceiling,
a streaming kernel -- STREAM's add, McCalpin 1995 -- for the slope); the
step's ops are timed by ``torch.profiler`` and named as
:func:`labkit.predict.roofline.step_ops` names them, so that a lab
reads ``predicted[name]`` beside ``measured[name]``. One process: a
roofline is a property of one chip, no launch needed.
"""
from __future__ import annotations

import contextlib
import time

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _sync(device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize()


def _best(fn, repeats: int, device: str = "cpu") -> float:
    fn()                                   # warm-up: allocation, threads
    _sync(device)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - t)
    return best


def matmul_rate(m: int, dtype: str = "fp32", repeats: int = 5,
                device: str = "cpu", k: int | None = None,
                n: int | None = None) -> float:
    """FLOP/s of ``(m, k) @ (k, n)`` (square by default): ``2 m k n``
    over the best time of ``repeats``."""
    k, n = k or m, n or m
    g = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=g).to(device, DTYPES[dtype])
    b = torch.randn(k, n, generator=g).to(device, DTYPES[dtype])
    out = torch.empty(m, n, dtype=DTYPES[dtype], device=device)
    return 2.0 * m * k * n / _best(lambda: torch.mm(a, b, out=out),
                                   repeats, device)


def stream_rate(numel: int, repeats: int = 5, device: str = "cpu"
                ) -> float:
    """Bytes/s of ``out = a + b`` on fp32 vectors: 3 x 4 x numel bytes
    (two reads, one write) over the best time."""
    a = torch.ones(numel, device=device)
    b = torch.ones(numel, device=device)
    out = torch.empty(numel, device=device)
    return 12.0 * numel / _best(lambda: torch.add(a, b, out=out), repeats,
                                device)


def call_overhead(calls: int = 2000, repeats: int = 5) -> float:
    """Seconds one framework call costs beyond its work: AdamW's in-place
    calls (``mul_``, ``add_``, ``lerp_``, ``addcmul_``, ``sqrt``, ``div``,
    ``addcdiv_``) on an 8-value tensor, whose bytes and FLOPs are nothing;
    the least CPU time of this process over ``repeats`` loops, per call."""
    t, g = torch.ones(8), torch.full((8,), 0.5)
    per = 7

    def loop():
        for _ in range(calls // per):
            t.mul_(1.0).add_(g).lerp_(g, 0.1).addcmul_(g, g, value=0.1)
            t.addcdiv_(g, t.sqrt().div(2.0), value=-1e-3)
    loop()
    best = float("inf")
    for _ in range(repeats):
        c = time.process_time()
        loop()
        best = min(best, time.process_time() - c)
    return best / (calls // per * per)


# profiler event names -> the names of predict.roofline.step_ops; an event
# inside one already counted (aten::mm inside aten::addmm's caller) is not
# counted twice
NAMES = (("Optimizer.step", "adamw"),
         ("scaled_dot_product", "attention core"),
         ("layer_norm", "layernorm"), ("gelu", "gelu"),
         ("log_softmax", "cross-entropy"), ("nll_loss", "cross-entropy"),
         ("embedding", "embedding"),
         ("aten::addmm", "matmul"), ("aten::mm", "matmul"),
         ("aten::add", "residual & bias"), ("aten::sum", "residual & bias"))


def matmul_name(shapes, hidden: int, vocab: int, mlp_ratio: int = 4) -> str:
    """Which of the GPT's linears a recorded matmul belongs to, from the
    widths in its input shapes (tokens must differ from every width)."""
    dims = {d for s in shapes for d in (s or [])}
    if vocab in dims:
        return "head matmul"
    if mlp_ratio * hidden in dims:
        return "mlp matmuls"
    if 3 * hidden in dims:
        return "qkv matmul"
    return "attention out matmul"


def classify(event, hidden: int, vocab: int, mlp_ratio: int = 4):
    for key, name in NAMES:
        if key in event.name and (key != "aten::add" or event.name in (
                "aten::add", "aten::add_")):
            if name == "matmul":
                return matmul_name(event.input_shapes, hidden, vocab,
                                   mlp_ratio)
            return name
    return None


def _counted_above(event, hidden, vocab, mlp_ratio) -> bool:
    p = event.cpu_parent
    while p is not None:
        if classify(p, hidden, vocab, mlp_ratio):
            return True
        p = p.cpu_parent
    return False


def train_step(model, x, y, opt):
    loss = model(x, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


@contextlib.contextmanager
def one_thread():
    """torch on one thread inside the block, as a rank runs (the launcher
    sets ``OMP_NUM_THREADS=1``); the caller's count given back."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def step_rate(model, x, y, opt, flops: float, steps: int = 3,
              warmup: int = 1) -> dict:
    """The FLOP/s one training step of ``model`` reaches on this CPU, on
    one thread as a rank runs (the launcher sets ``OMP_NUM_THREADS=1``):
    ``flops`` (the step's hardware FLOPs, e.g. :func:`labkit.predict.fit.
    step_flops`) over the least CPU seconds of ``steps`` steps. A
    calibrated roofline's rate for this model: the matmuls' share of the
    peak with every framework call in it (chapter 16). ``{"flops_per_s",
    "step_cpu_s"}``."""
    with one_thread():
        for _ in range(warmup):
            train_step(model, x, y, opt)
        best = float("inf")
        for _ in range(steps):
            c = time.process_time()
            train_step(model, x, y, opt)
            best = min(best, time.process_time() - c)
    return {"flops_per_s": flops / best, "step_cpu_s": best}


def planner_rate(model: dict, batch: int) -> dict:
    """Lab 12's planner rate on this CPU (its profile's ``flops_per_s:
    measured``): :func:`step_rate` of the lab's ``model`` dict
    (``labkit.nn.model.GPTConfig``'s fields) on ``batch`` sequences, AdamW,
    one thread; and that thread's fp32 matmul ``peak`` beside it (the
    rate's share of the peak is the calibrated efficiency). ``{"flops_per_s",
    "step_cpu_s", "peak"}``."""
    from labkit.nn.model import GPTConfig, batch as make_batch, build
    from labkit.predict.fit import step_flops
    cfg = GPTConfig(**model)
    net = build(cfg)
    x, y = make_batch(cfg, batch, 0)
    out = step_rate(net, x, y, torch.optim.AdamW(net.parameters()),
                    step_flops(model, batch))
    with one_thread():
        out["peak"] = max(matmul_rate(n, "fp32") for n in (256, 512))
    return out


def step_times(model, x, y, opt, steps: int = 3, warmup: int = 2,
               device: str = "cpu") -> dict:
    """Time one training step: ``{"ops": {name: seconds per step},
    "step_s": wall seconds, "step_cpu_s": this process's CPU seconds (on
    the CPU; None on a GPU), "profiled_s": the profiled step's}``.

    Best of ``steps``, as the roofline's rates are: a shared machine adds
    waits that are not the step's. On a CPU that other processes share,
    the wall clock also counts the time slices they hold the core for
    (at a load of 14 on 2 cores, a 75 ms step took 450 ms of wall); the
    process's CPU time counts only the step's own, which is what a
    roofline predicts. The times are measured without the
    profiler (it adds its own cost); each op is the profiler's inclusive
    time of the outermost event of its kind (on a GPU: the device time
    of its kernels), summed over one step, the least of ``steps``
    profiled steps."""
    from torch.profiler import ProfilerActivity, profile
    a = model.arch
    hidden, vocab = a.hidden, a.vocab
    ratio = a.ffn // a.hidden
    for _ in range(warmup):
        train_step(model, x, y, opt)
    _sync(device)
    walls, cpus = [], []
    for _ in range(steps):
        t, c = time.perf_counter(), time.process_time()
        train_step(model, x, y, opt)
        _sync(device)
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    acts = [ProfilerActivity.CPU] + (
        [ProfilerActivity.CUDA] if device != "cpu" else [])
    best: dict[str, float] = {}
    profiled = []
    for _ in range(steps):
        with profile(activities=acts, record_shapes=True) as prof:
            t = time.perf_counter()
            train_step(model, x, y, opt)
            _sync(device)
            profiled.append(time.perf_counter() - t)
        ops: dict[str, float] = {}
        for ev in prof.events():
            name = classify(ev, hidden, vocab, ratio)
            if name and not _counted_above(ev, hidden, vocab, ratio):
                us = (ev.device_time_total if device != "cpu"
                      else ev.cpu_time_total)
                ops[name] = ops.get(name, 0.0) + us / 1e6
        for k, v in ops.items():
            best[k] = min(v, best.get(k, v))
    return {"ops": best, "step_s": min(walls), "profiled_s": min(profiled),
            "step_cpu_s": min(cpus) if device == "cpu" else None}
