"""``python -m labkit dryrun``: the command line of :mod:`labkit.dryrun`.

    python -m labkit dryrun --profile gpu8 --json
    python -m labkit dryrun --layers 80 --hidden 8192 --heads 64 \
        --vocab 32000 --seq 4096 --batch 1 --gpus 16 --strategy fsdp2_full
    python -m labkit dryrun --hf-config config.json --seq 4096 --gpus 8 \
        --strategy fsdp2_full --json      # the model's own architecture

A table (GB = 1e9 bytes) or ``--json`` (bytes) per lab and rank role; a
case fits when its peak plus the runtime floor leaves the margin free
(:func:`labkit.predict.memory.job.on_gpu`; "margin" in the table is the
headroom left after the floor). Exit status 1 when a lab's model states
differ from the ledger by > 1 %.
"""
from __future__ import annotations

import json

from labkit.dryrun import labs as L
from labkit.dryrun.budget import time_limit  # noqa: F401 (the limit)
from labkit.dryrun.step import dry_step

GB = 1e9
ROWS = ("params", "grads", "optimizer", "activations", "gathered", "other",
        "peak")


def gpu_bytes(name: str) -> float:
    from labkit.predict.choosing import GPUS
    if name not in GPUS:
        raise ValueError(f"unknown --gpu {name!r}; choose from "
                         f"{', '.join(GPUS)}")
    return GPUS[name].memory


def verdict(measured: dict, pred: dict, gpu: float, world: int) -> dict:
    """The counted step against the ledger, and against the GPU: the
    peak plus the runtime floor with a margin left
    (:func:`labkit.predict.memory.job.on_gpu`, the rule preflight
    judges its predictions by)."""
    from labkit.predict.memory.job import on_gpu
    states = sum(measured[k] for k in ("params", "grads", "optimizer"))
    need = on_gpu(measured["peak"], world, gpu)
    ratio = states / pred["states"] if pred.get("states") else None
    # PyTorch's own execution must agree with the ledger (a wrong dtype or
    # an unsharded tensor shows here first)
    return {**measured, "states": states, "predicted": pred,
            "states_ratio": ratio,
            "agrees": ratio is None or abs(ratio - 1) <= 0.01,
            "gpu_bytes": gpu, "floor": need["floor"], "need": need["need"],
            "fits": need["fits"], "margin_bytes": need["headroom"]}


def run_cases(cases: list, gpu: float, cache: dict) -> list[dict]:
    rows = []
    for c in cases:
        key = c.key or id(c)
        if key not in cache:
            cache[key] = (c.lab, c.variant, dry_step(c))
        first_lab, first_variant, measured = cache[key]
        row = {"variant": c.variant, "role": c.role, "rank": c.rank,
               "world_size": c.world_size,
               **verdict(measured, c.predicted, gpu, c.world_size)}
        if (first_lab, first_variant) != (c.lab, c.variant):
            row["same_run_as"] = f"{first_lab}/{first_variant}"
        rows.append(row)
    return rows


_PENDING: list = []  # the cases a forked worker runs, by index


FORK_REFUSED = "autograd's threading in combination with fork"


def _dry_step_at(i: int):
    try:
        return i, dry_step(_PENDING[i])
    except RuntimeError as e:
        # a parent that ran autograd on a device engine thread before the
        # fork leaves children that cannot run backward (PyTorch's wiki,
        # "Autograd and Fork"): the parent runs that case itself
        if FORK_REFUSED in str(e):
            return i, None
        raise


def _die_with_parent() -> None:
    """A pool worker ends with the process that forked it, even when that
    one is SIGKILLed (a stopped rehearsal leaves no worker): a thread
    watches its parent. Not ``PR_SET_PDEATHSIG``: that fires when the
    forking *thread* ends, and the pool's handler thread ends at the
    pool's close while an idle worker holds the task queue's lock."""
    import os
    import signal
    import threading
    import time
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(0.25)
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent ends
    for sig in (signal.SIGTERM, signal.SIGHUP):   # them, without a word
        signal.signal(sig, signal.SIG_DFL)


def run_all(cases: list, cache: dict, workers: int, after=None) -> None:
    """Fill ``cache`` with one step per distinct case, ``workers`` at once.

    Each step runs in its own forked process (fake mode and the fake
    process group are per process), so the profile's cases share the
    machine's cores; only the measured bytes come back. A case a forked
    child cannot run (autograd refuses after the parent's engine threads)
    runs in this process instead, after the pool. ``after()`` is called
    each time a step lands in ``cache`` (a caller's progress)."""
    import multiprocessing as mp
    todo, seen = [], set()
    for c in cases:
        key = c.key or id(c)
        if key not in cache and key not in seen:
            seen.add(key)
            todo.append(c)
    if workers <= 1 or len(todo) <= 1:
        if after:
            after()
        return
    _PENDING[:] = todo
    refused = []
    try:
        with mp.get_context("fork").Pool(
                workers, initializer=_die_with_parent,
                maxtasksperchild=1) as pool:
            for i, measured in pool.imap_unordered(_dry_step_at,
                                                   range(len(todo))):
                if measured is None:
                    refused.append(i)
                    continue
                c = todo[i]
                cache[c.key or id(c)] = (c.lab, c.variant, measured)
                if after:
                    after()
    finally:
        _PENDING.clear()
    for i in sorted(refused):
        c = todo[i]
        cache[c.key or id(c)] = (c.lab, c.variant, dry_step(c))
        if after:
            after()


def dry_profile(profile: str, gpu: float, only: str | None = None,
                workers: int | None = None, on_lab=None) -> dict:
    """Every lab of ``labs/profiles/<profile>.yaml``: its rows or why not.

    The distinct cases run ``workers`` at a time (default: one per core).
    ``on_lab(name, result)`` is called for each lab as soon as its last
    case is done (the command prints that lab's table then: a long
    profile shows its labs as they finish, not all at the end)."""
    import os
    from labkit.preflight import load_profile
    prof = load_profile(profile)
    if only is not None and only not in prof:
        raise ValueError(f"no lab {only!r} in profile {profile}")
    names = [n for n in prof if only is None or n == only]
    cases = {n: L.ADAPTERS[n](prof[n]) for n in names if n in L.ADAPTERS}
    out, cache = {}, {}

    def finish(name):
        if name in cases:
            out[name] = {"cases": run_cases(cases[name], gpu, cache)}
            if name == "zero":
                out[name]["not_dry_run"] = L.ZERO_DEEPSPEED
        else:
            out[name] = {"cannot": L.REASONS.get(
                name, "no dry-run adapter yet (labkit/dryrun/labs.py)")}
        if on_lab:
            on_lab(name, out[name])

    def after():    # every lab whose cases are all in the cache
        for name in names:
            if name not in out and all((c.key or id(c)) in cache
                                       for c in cases.get(name, [])):
                finish(name)

    run_all([c for cs in cases.values() for c in cs], cache,
            workers or len(os.sched_getaffinity(0)), after)
    for name in names:       # steps run here, one by one (no pool)
        if name not in out:
            finish(name)
    return {name: out[name] for name in names}


def shape_rows(c, strategy: str, gpus: list[int], gpu: str = "h100-80gb",
               batch: int = 1, bf16: bool = True) -> dict[int, dict]:
    """One free shape at several world sizes (the 70B case of chapter 1):
    its row per world size, the sizes run one per core."""
    import os
    cases = {n: L.dp_case("shape", strategy, c, n, batch * n, bf16)
             for n in gpus}
    cache: dict = {}
    run_all(list(cases.values()), cache, len(os.sched_getaffinity(0)))
    return {n: run_cases([case], gpu_bytes(gpu), cache)[0]
            for n, case in cases.items()}


def dry_shape(a) -> dict:
    c = L.GPTConfig(vocab=a.vocab, seq=a.seq, layers=a.layers,
                    hidden=a.hidden, heads=a.heads)
    rows = shape_rows(c, a.strategy, [a.gpus], a.gpu, a.batch, not a.fp32)
    return {"shape": {"cases": [rows[a.gpus]]}}


def arch_case(rec, strategy: str, world: int, micro_batch: int, seq: int,
              bf16: bool):
    """A data-parallel step of the decoder an architecture record
    describes (:func:`labkit.nn.model.build_arch`), as :func:`labkit.training.train
    .setup` builds the GPT's; predicted: the model-state ledger (fp32
    weights and Adam, 16 bytes per parameter)."""
    from labkit.nn.model import build_arch
    from labkit.predict.model import params as P
    from labkit.predict.memory import ledger
    from labkit.training.train import make_optimizer
    from labkit.training.wrap import (ZERO_EQUIVALENT, autocast,
                                      shard_group_of, wrap)
    if not strategy.startswith(("fsdp2", "ddp")):
        raise ValueError("--hf-config/--preset run ddp or fsdp2_* strategies"
                         f" (FSDP1's wrap policy names the GPT's modules), "
                         f"got {strategy!r}")
    cfg = L.GPTConfig(vocab=rec.vocab, seq=seq)

    def setup(ctx):
        from labkit.dryrun.fake import fake_ddp_hook
        from labkit.dryrun.experts_lab import even_routing
        model = build_arch(rec)
        even_routing(model)   # fake tensors cannot count routed rows
        model = wrap(model, strategy, ctx, bf16=bf16)
        if strategy == "ddp" and ctx.backend == "fake":
            fake_ddp_hook(model)
        opt, amp = make_optimizer(model), autocast(ctx, strategy, bf16)
        x, y = L.local_batch(*L.batch(cfg, micro_batch * world, 0,
                                      device=ctx.device),
                             ctx.rank, ctx.world_size)

        def step(tracker):
            opt.zero_grad(set_to_none=True)
            with amp:
                loss = tracker.forward(model, x, y)
            loss.backward()
            opt.step()
        return model, opt, step
    group = shard_group_of(strategy)
    led = ledger(P.total(rec), world, ZERO_EQUIVALENT[strategy],
                 precision="fp32",
                 **({"shard_group": group} if group else {}))
    # a text-only step skips the cross-attention layers: no gradient for
    # them (their Adam moments exist: warm_optimizer made every one)
    trained = 1 - P.text_step_idle(rec) / P.total(rec)
    grads, opt = led.grads_gpu * trained, led.optimizer_gpu
    states = led.params_gpu + grads + opt
    pred = {"params": led.params_gpu, "grads": grads,
            "optimizer": opt, "gathered": led.transient_gpu,
            "activations": None, "states": states,
            "total": led.gpu_total - (led.grads_gpu - grads)}
    return L.Case("arch", strategy, "every rank", world, 0, setup, pred,
                  ("arch", strategy, str(rec), world, micro_batch, seq,
                   bf16))


def dry_arch(a, rec) -> dict:
    if a.seq is None:
        raise ValueError("--hf-config/--preset need --seq (tokens per "
                         "sequence of the step)")
    import argparse
    from labkit import cli_rules
    from labkit.training.wrap import check_strategy
    layers = cli_rules.value(rec.layers, "layers", int,
                             f"{rec.name or 'the model'}: layers", "dryrun")
    cli_rules.check_costs("dryrun", argparse.Namespace(layers=layers,
                                                       gpus=a.gpus))
    check_strategy(a.strategy, a.gpus)
    case = arch_case(rec, a.strategy, a.gpus, a.batch, a.seq, not a.fp32)
    row = run_cases([case], gpu_bytes(a.gpu), {})[0]
    return {rec.name or "arch": {"cases": [row]}}


def add_arguments(p) -> None:
    from labkit import arch
    arch.add_arguments(p)   # a model's config.json or a named preset
    p.add_argument("--profile", help="gpu8, gpu1, cpu: every lab of the "
                   "profile at its sizes")
    p.add_argument("--only", help="one lab of the profile")
    p.add_argument("--gpu", default="h100-80gb",
                   help="the GPU whose memory decides 'fits'")
    for name in ("layers", "hidden", "heads", "vocab", "seq"):
        p.add_argument(f"--{name}", type=int, help="free shape: " + name)
    p.add_argument("--batch", type=int, default=1,
                   help="free shape: micro-batch per rank")
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--strategy", default="fsdp2_full",
                   help="free shape: a labkit.training.wrap strategy")
    p.add_argument("--fp32", action="store_true",
                   help="free shape: fp32 compute (default bf16)")
    p.add_argument("--json", action="store_true")


def main(a) -> int:
    shape = [a.layers, a.hidden, a.heads, a.vocab, a.seq]
    if a.profile and any(v is not None for v in shape):
        raise ValueError("give --profile or a free shape, not both")
    from labkit import arch
    rec = arch.from_args(a)
    if rec is not None and (a.profile or any(
            v is not None for v in shape[:4])):
        raise ValueError("give --hf-config/--preset or a free shape or "
                         "--profile, not two")
    if rec is not None:
        out = dry_arch(a, rec)
    elif a.profile:
        if not a.json:
            print(table({}, a.gpu), flush=True)     # the heading, once
        shown = None if a.json else (lambda name, res: print(
            table({name: res}, a.gpu).split("\n", 1)[1], flush=True))
        out = dry_profile(a.profile, gpu_bytes(a.gpu), a.only,
                          on_lab=shown)
    elif all(v is not None for v in shape):
        from labkit.training.wrap import check_strategy
        check_strategy(a.strategy, a.gpus)
        out = dry_shape(a)
    else:
        raise ValueError("give --profile NAME or all of --layers --hidden "
                         "--heads --vocab --seq")
    bad = [f"{lab}/{r['variant']}" for lab, res in out.items()
           for r in res.get("cases", []) if not r["agrees"]]
    if a.json:
        print(json.dumps({"gpu": a.gpu, "labs": out, "unit": "bytes",
                          "disagree": bad}, indent=1))
    else:
        if not a.profile:     # a profile's tables came lab by lab
            print(table(out, a.gpu))
        if bad:
            print("model states differ from the ledger by > 1 %: "
                  + ", ".join(bad))
    return 1 if bad else 0


def table(out: dict, gpu: str) -> str:
    lines = [f"dry run, per rank, GB = 1e9 bytes; GPU {gpu}"]
    head = "".join(f"{r[:6]:>8s}" for r in ROWS)
    for name, res in out.items():
        if "cannot" in res:
            lines.append(f"{name}: not dry-run: {res['cannot']}")
            continue
        lines.append(f"{name}:")
        lines.append(f"  {'variant':22s}{'ranks':>6s}{head}{'pred':>8s}"
                     "  fits (margin)")
        for r in res["cases"]:
            cells = "".join(f"{r[k] / GB:8.2f}" for k in ROWS)
            fit = "fits" if r["fits"] else "DOES NOT FIT"
            total = r["predicted"].get("total")   # lab 13 prices parts
            pred = f"{total / GB:8.2f}" if total is not None else f"{'-':>8s}"
            lines.append(f"  {r['variant']:22s}{r['world_size']:6d}{cells}"
                         f"{pred}  {fit} "
                         f"({r['margin_bytes'] / GB:+.1f})")
    return "\n".join(lines)
