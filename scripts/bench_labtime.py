"""The run plan's CPU constants, measured, and each lab's measured time:
the table ``labkit.predict.labtime`` reads and its test holds it to.

    python scripts/bench_labtime.py                      # constants + labs
    python scripts/bench_labtime.py --from _build/labs/cpu   # labs' run.json
    python scripts/bench_labtime.py --constants-only     # keep the labs
    python scripts/bench_labtime.py --only schedules     # add one lab
    python scripts/bench_labtime.py --cpu-only           # runs' CPU s

What a lab on the CPU profile spends its time on is start-up and a few
framework calls, not FLOPs, so the plan (``labkit.predict.labtime``) is
built from parts measured here, each once, the way a lab meets them:

* ``import_s``: ``python -c 'import torch'`` (a rank's interpreter);
* ``kernel_s``: papermill executing a notebook whose one cell imports
  what every lab imports (a Jupyter kernel, torch, pandas, matplotlib,
  ``labkit.lab``, ``labkit.launch``);
* ``launch_s``: ``labkit.launch.launch`` of ``labkit.runs.tools.selftest``
  on 2 and on 4 gloo ranks (torchrun, its guard, the ranks' imports,
  rendezvous, one all-reduce): a launch that does nothing;
* ``run_s`` and ``deepspeed_run_s``: what one training run inside a
  launch costs (build, wrap, a few steps, the counting): lab 4's
  ``run_fsdp`` (FSDP2, both strategies) and ``run_deepspeed`` (ZeRO 1, 2
  and 3) of ``labkit.runs.zero`` in this process as a 1-rank gloo group,
  at the CPU profile's model: their CPU time, times ``slowdown`` (the
  difference of two launches' walls was too noisy on a shared machine);
* ``first_run_s``, ``deepspeed_first_s``, ``stack_s``: what a launch's
  ranks meet the first time and a warm process never shows (the lazy
  imports of FSDP, Dynamo, the optimizer's first step; DeepSpeed's
  engine; the functional collectives), from three real 2-rank launches
  (``first_use_walls``): lab 4's run module training one FSDP2 run, less
  a bare launch and ``run_s``; the same with one ZeRO-1 engine more,
  less that launch and ``deepspeed_run_s``; lab 2's counter check, less
  a bare launch;
* ``build_s``: in the kernel, the CPU model built and one training step
  (what a reference run or a ledger's measurement costs a cell);
* ``compile_s``: a launch of ``labkit.runs.compile`` at lab 12's CPU
  parameters on an empty Inductor cache (every graph compiled, as on a
  fresh clone; the labs run here on one too); the plan counts what it
  adds to a bare launch of its ranks;
* ``colossalai_import_s``: ``import colossalai`` in ``.venv-colossalai``;
* ``ddp_run_s``: one of lab 3's DDP runs (``labkit.runs.sharding``'s
  ``run_strategy``, at its steps and timed steps), and
  ``colossalai_run_s``: one run of a lab 9 plugin (``labkit.runs.
  colossalai``'s ``run_plugin``: build, boost, steps), the mean over the
  profile's plugins, in ``.venv-colossalai``'s interpreter as a 1-rank
  gloo group; like ``run_s``, their CPU time (``cpu_s``, as measured)
  times ``slowdown``, the wall beside (``colossalai_run_wall_s``); and
  ``precision_local_s``, lab 14's one-process part (``labkit.runs.
  precision.local_part``, which rank 0 computes while the others wait),
  the same way, on one thread as a rank has; and ``ledger_s``, one of
  lab 1's ledger checks in its kernel (a build, its forward's storages
  measured, the record's ledger), the mean over its precisions and
  recomputations;
* ``slowdown``: wall over CPU seconds of a one-thread matmul loop run
  for a few seconds: the share of a core a process gets on this machine
  at the time (1 on an idle machine); the plan's terms that come from
  the roofline (CPU time) are multiplied by it, the measured ones
  (wall times) already carry it;
* ``peak_flops`` / ``bandwidth``: one core's fp32 matmul rate and
  streaming bandwidth (``labkit.measure.roofline``), for the steps the
  labs run (``labkit.predict.roofline.step_time``), and ``bf16_flops``.

Beside them, lab 16's step (:func:`roofline_step`): its predicted time
on this core's measured roofline against the process's CPU time of the
step, the issue's target being within 30 %.

The labs' times come from one run of ``scripts/run_labs.py --profile
cpu`` (``--from``: its ``run.json`` files) or are run here, one lab at a
time, with a bare 2-rank launch timed before the first and after each
(``probe_launch_s``: the mean of the two around a lab): a record of how
fast the shared machine started processes at each lab's hour (it drifts
within a sitting: 2.5 to 6.6 s in one).

CPU seconds do not depend on the hour: ``--cpu-only`` measures the run
costs' CPU seconds (``cpu_s``) into an existing table and prices them at
that table's ``slowdown``, so a new run cost joins constants measured at
another hour without the load of this one. Everything is written, with
the machine's cores and load average before and after, to
``labkit/predict/labtime/cpu.json``: a shared machine's speed varies
between hours, so the constants and the labs are measured in one
sitting, and the table says when. A lab added after
that sitting (``--only``, repeatable) is run alone and written into the
existing table beside the others, which keep their seconds, and the
constants theirs; ``apart`` lists such labs with when they ran, the load
average before and after, and the ``slowdown`` at the time, so a reader
sees which seconds were not measured with the constants.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))
TABLE = ROOT / "labkit" / "predict" / "labtime" / "cpu.json"
from run_labs import empty_compile_cache  # noqa: E402
LAB_IMPORTS = ("import matplotlib.pyplot as plt\nimport pandas as pd\n"
               "import torch\nfrom labkit.lab import Results, check\n"
               "from labkit.launch import launch\n")


def best(fn, repeats: int = 3) -> float:
    """The least wall time of ``repeats`` calls: a busy machine only ever
    adds time."""
    out = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return out


def _python(code: str, python: str = sys.executable) -> None:
    subprocess.run([python, "-c", code], check=True, timeout=300,
                   capture_output=True)


def kernel_s() -> float:
    import nbformat
    import papermill as pm
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(LAB_IMPORTS)]
    with tempfile.TemporaryDirectory(prefix="labtime-") as tmp:
        src, dest = Path(tmp) / "in.ipynb", Path(tmp) / "out.ipynb"
        nbformat.write(nb, src)
        return best(lambda: pm.execute_notebook(
            str(src), str(dest), cwd=str(ROOT / "labs"),
            kernel_name="python3", progress_bar=False), 2)


def _launch(module: str, nproc: int, args: dict, python=None) -> None:
    from labkit.launch import launch
    launch(module, nproc, args, timeout=600, python=python)


def _build(model: dict) -> None:
    from labkit.nn.model import GPTConfig, batch, build
    cfg = GPTConfig(**model)
    net = build(cfg)
    x, y = batch(cfg, 8, 0)
    net(x, y).backward()


def run_costs(model: dict, zero: dict) -> dict:
    """CPU seconds of one torch run and one DeepSpeed run of lab 4's run
    module, in this process as a 1-rank group (the least of two each)."""
    from labkit import dist
    from labkit.launch import free_port
    from labkit.runs import zero as Z
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                      RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                      CUDA_VISIBLE_DEVICES="")
    a = Z.parse_args(["--steps", str(zero["steps"]), "--batch", "8",
                      "--reduce-bucket-size",
                      str(zero["reduce_bucket_size"])] + [
        f"--{k}={v}" for k, v in model.items()])
    config = Z.config_from_args(a)
    ctx = dist.init()
    Z.skip_shm_op()

    def cpu(fn, *args):
        c = time.process_time()
        fn(*args)
        return time.process_time() - c
    # lab 3's DDP runs (its strategy run and one per bucket cap), at its
    # steps and timed steps
    from labkit.preflight import load_profile
    from labkit.runs import sharding as S
    sh = load_profile("cpu")["sharding"]
    b = argparse.Namespace(bf16=False, seed=0, shard_group=1, batch=8,
                           steps=sh["steps"], time_steps=sh["time_steps"])
    try:
        torch_s = [min(cpu(Z.run_fsdp, s, config, ctx, a) for _ in (0, 1))
                   for s in ("fsdp2_full", "fsdp2_grad_op")]
        ds_s = [min(cpu(Z.run_deepspeed, v, config, ctx, a)
                    for _ in (0, 1)) for v in ("zero1", "zero2", "zero3")]
        ddp_s = min(cpu(S.run_strategy, "ddp", config, ctx, b, 25.0)
                    for _ in (0, 1))
    finally:
        dist.close()
    return {"run_s": sum(torch_s) / len(torch_s),
            "deepspeed_run_s": sum(ds_s) / len(ds_s), "ddp_run_s": ddp_s}


def ledger_s(model: dict) -> float:
    """CPU seconds of one of lab 1's ledger checks (its ``kept``): the
    model built with a recomputation, what its forward keeps measured
    (``labkit.measure.activations.measure``), and the record's ledger
    (``labkit.predict.activations.arch.saved``), the mean over the
    precisions and recomputations, at the CPU profile's model and lab
    1's smaller micro-batch."""
    import torch
    from labkit.measure.activations import measure
    from labkit.nn.model import GPTConfig, arch_of, batch, build_arch
    from labkit.predict import activations as A
    from labkit.predict.activations import arch as AA
    from labkit.training.recompute import apply
    cfg, mb = GPTConfig(**model), 2
    rec = arch_of(cfg)

    def one(prec, rc):
        x, y = batch(cfg, mb, step=0)
        net = apply(build_arch(rec), rc)
        amp = torch.autocast("cpu", dtype=torch.bfloat16) \
            if prec == "autocast_bf16" else None
        measure(net.to(torch.bfloat16) if prec == "fsdp_bf16" else net,
                x, y, amp)
        AA.saved(rec, cfg.seq, mb, prec, rc, device="cpu",
                 strided_targets=not y.is_contiguous())
    one("fp32", "none")           # the first call's imports aside
    combos = [(p, r) for p in A.PRECISIONS for r in A.RECOMPUTE]
    c = time.process_time()
    for p, r in combos:
        one(p, r)
    return (time.process_time() - c) / len(combos)


def precision_local(section: dict) -> float:
    """CPU seconds of lab 14's one-process part (``labkit.runs.precision.
    local_part``: rank 0 computes it while the other ranks wait) at the
    profile's sizes, in this process, the least of two."""
    from labkit.measure.roofline import one_thread
    from labkit.runs import precision as P
    a = P.parse_args([f"--{k.replace('_', '-')}={section[k]}" for k in (
        "preset", "hidden", "ffn", "micro_batch", "block", "scaler_steps",
        "init_scale", "growth_interval") if k in section] + [
        "--ks", ",".join(map(str, section.get("ks", [1, 4, 16, 32])))])
    out = float("inf")
    with one_thread():           # a rank's one thread
        for _ in range(2):
            c = time.process_time()
            P.local_part(P.widened(a), a)
            out = min(out, time.process_time() - c)
    return out


CAI_RUNS = """
import json, sys, time
from labkit.runs import colossalai as C
cpu, wall, run = {}, {}, C.run_plugin
def timed(name, *args):
    c, w = time.process_time(), time.perf_counter()
    out = run(name, *args)
    cpu[name] = time.process_time() - c
    wall[name] = time.perf_counter() - w
    return out
C.run_plugin = timed
C.dist.save = lambda ctx, record: None
C.main(sys.argv[1:])
print(json.dumps({"cpu": cpu, "wall": wall}))
"""


def colossalai_runs(python: Path, section: dict) -> dict:
    """Lab 9's plugins, each one run (build, boost, its steps) in a
    1-rank gloo group in ``.venv-colossalai``'s interpreter: CPU and wall
    seconds per plugin run, the mean over the profile's plugins."""
    from labkit.launch import free_port
    m = section["model"]
    argv = ["--plugins", ",".join(section["plugins"]), "--steps",
            str(section["steps"]), "--batch", str(section["global_batch"])
            ] + [f"--{k}={v}" for k, v in m.items()]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "RANK": "0",
           "MASTER_PORT": str(free_port()), "WORLD_SIZE": "1",
           "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
           "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([str(python), "-c", CAI_RUNS, *argv], check=True,
                       timeout=300, capture_output=True, text=True, env=env)
    got = json.loads(r.stdout.strip().splitlines()[-1])
    return {k: sum(v.values()) / len(v) for k, v in got.items()}


def first_use(zero: dict) -> dict:
    """The walls of the launches that give the first-use terms: lab 4's
    run module training one FSDP2 run, then one run and one DeepSpeed
    engine (ZeRO-1), and lab 2's run module doing only its counter check
    (one call of each collective through the functional collectives), on
    2 gloo ranks, the least of two each."""
    m = zero["model"]
    base = {"steps": zero["steps"], "batch": zero["global_batch"],
            "reduce_bucket_size": zero["reduce_bucket_size"],
            "time_steps": 0, "fsdp": "fsdp2_full", **m}
    return {"train": best(lambda: _launch("labkit.runs.zero", 2, {
                **base, "variants": ""}), 2),
            "deepspeed": best(lambda: _launch("labkit.runs.zero", 2, {
                **base, "variants": "zero1"}), 2),
            "stack": best(lambda: _launch("labkit.runs.collectives", 2, {
                "counter_check": True}), 2)}


def first_terms(walls: dict, launch2: float, run_s: float,
                deepspeed_run_s: float) -> dict:
    """``first_run_s``: the training launch, less a bare launch and the
    run's own price; ``deepspeed_first_s``: the launch with an engine,
    less the training launch and the engine's run; ``stack_s``: the
    counter check's launch, less a bare one (never below 0)."""
    return {"first_run_s": round(max(0.0, walls["train"] - launch2 -
                                     run_s), 3),
            "deepspeed_first_s": round(max(0.0, walls["deepspeed"] -
                                           walls["train"] -
                                           deepspeed_run_s), 3),
            "stack_s": round(max(0.0, walls["stack"] - launch2), 3)}


def constants() -> dict:
    from labkit.measure import roofline as M
    from labkit.preflight import load_profile
    import torch
    cpu = load_profile("cpu")
    model = cpu["memory"]["model"]
    out = {"import_s": best(lambda: _python("import torch")),
           "kernel_s": kernel_s(),
           "launch_s": {str(n): best(lambda: _launch(
               "labkit.runs.tools.selftest", n, {"mode": "ok"}))
               for n in (2, 4)}}
    walls = first_use(cpu["zero"])
    out["build_s"] = best(lambda: _build(model))
    fit = cpu["fit"]
    with empty_compile_cache():   # every graph compiled, as on a fresh clone
        out["compile_s"] = best(lambda: _launch(
            "labkit.runs.compile", fit["world_size"], {
                "steps": fit["compile_steps"],
                "backend": fit["compile_backend"],
                "preset": fit["compile_preset"]}), 1)
    cai = ROOT / ".venv-colossalai" / "bin" / "python"
    out["colossalai_import_s"] = best(lambda: _python(
        "import colossalai", str(cai)), 2) if cai.exists() else None
    out.update(cpu_constants())
    torch.set_num_threads(1)
    out["slowdown"] = slowdown()
    out.update(priced(out["cpu_s"], out["slowdown"]))
    out["first_use_walls"] = {k: round(v, 3) for k, v in walls.items()}
    out.update(first_terms(walls, out["launch_s"]["2"],
                           out["run_s"], out["deepspeed_run_s"]))
    out["peak_flops"] = max(M.matmul_rate(n, "fp32", 5)
                            for n in (256, 512))
    out["bf16_flops"] = M.matmul_rate(512, "bf16", 3)
    out["bandwidth"] = M.stream_rate(1 << 24, 5)
    out["launch_s"] = {k: round(v, 3) for k, v in out["launch_s"].items()}
    return {k: (round(v, 3) if isinstance(v, float) and v < 1e6 else v)
            for k, v in out.items()}


def cpu_constants() -> dict:
    """The runs' CPU seconds, measured in process (a loaded machine
    stretches their wall, not their CPU time): ``cpu_s``, and Colossal-AI
    run's wall beside (``colossalai_run_wall_s``)."""
    from labkit.preflight import load_profile
    cpu = load_profile("cpu")
    out = {"cpu_s": run_costs(cpu["memory"]["model"], cpu["zero"])}
    out["cpu_s"]["precision_local_s"] = precision_local(cpu["precision"])
    out["cpu_s"]["ledger_s"] = ledger_s(cpu["memory"]["model"])
    cai = ROOT / ".venv-colossalai" / "bin" / "python"
    if cai.exists():
        run = colossalai_runs(cai, cpu["colossalai"])
        out["cpu_s"]["colossalai_run_s"] = run["cpu"]
        out["colossalai_run_wall_s"] = round(run["wall"], 3)
    out["cpu_s"] = {k: round(v, 3) for k, v in out["cpu_s"].items()}
    return out


def priced(cpu_s: dict, slow: float) -> dict:
    """The plan's prices of the runs: CPU seconds at ``slow``, the share
    of a core a process got when the table's constants were measured."""
    return {k: round(v * slow, 3) for k, v in cpu_s.items()}


def add_cpu_constants(out: Path) -> int:
    """``--cpu-only``: the runs' CPU seconds measured now, priced at the
    table's ``slowdown``; the table's labs and other constants kept."""
    if not out.exists():
        raise SystemExit(f"{out} is missing: run python "
                         "scripts/bench_labtime.py first")
    table = json.loads(out.read_text())
    load = [os.getloadavg()[0]]
    got = cpu_constants()
    c = table["constants"]
    c.update(got)
    c.update(priced(got["cpu_s"], c["slowdown"]))
    load.append(os.getloadavg()[0])
    table["cpu_s_measured"] = {
        "at": dt.datetime.now().isoformat(timespec="seconds"),
        "load_average": [round(x, 2) for x in load]}
    out.write_text(json.dumps(table, indent=1) + "\n")
    print(json.dumps(got["cpu_s"]), f"priced at slowdown {c['slowdown']}; "
          f"written to {out}")
    return 0


def slowdown(seconds: float = 3.0, threads: int | None = None) -> float:
    """Wall over CPU time of one thread multiplying 256 x 256 matrices for
    ``seconds`` of wall: how much longer than its own work a process
    waits for a core here, now."""
    import torch
    if threads:
        torch.set_num_threads(threads)
    a = torch.randn(256, 256)
    w, c = time.perf_counter(), time.process_time()
    while time.perf_counter() - w < seconds:
        for _ in range(20):
            a @ a
    return max(1.0, (time.perf_counter() - w) / (time.process_time() - c))


def roofline_step() -> dict:
    """Lab 16's step at the CPU profile's size, one thread: predicted
    (``labkit.predict.roofline.predict`` at the measured peak, bandwidth
    and call overhead) and measured (best CPU time of the process), as
    the lab computes them."""
    import torch
    from labkit.measure import roofline as M
    from labkit.nn.model import GPTConfig, batch, build
    from labkit.predict import roofline as R
    from labkit.preflight import load_profile
    p = load_profile("cpu")["roofline"]
    torch.set_num_threads(p["threads"])
    peak = max(M.matmul_rate(n, "fp32", p["repeats"])
               for n in p["matmul_sizes"])
    bw = M.stream_rate(max(p["stream_sizes"]), p["repeats"])
    call_s = M.call_overhead()
    cfg = GPTConfig(**p["model"])
    torch.manual_seed(0)
    net = build(cfg)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    x, y = batch(cfg, p["batch"], 0)
    ops = R.step_ops(p["batch"], cfg.seq, cfg.layers, cfg.hidden,
                     cfg.heads, cfg.vocab, cfg.mlp_ratio, 4)
    pred = R.predict(ops, peak, bw, call_s=call_s)
    meas = M.step_times(net, x, y, opt, steps=p["steps"])
    return {"predicted_s": round(pred["step_s"], 5),
            "measured_cpu_s": round(meas["step_cpu_s"], 5),
            "wall_s": round(meas["step_s"], 5),
            "ratio": round(meas["step_cpu_s"] / pred["step_s"], 3),
            "terms_s": {r["op"]: round(r["seconds"], 6)
                        for r in pred["ops"]},
            "overhead_s": round(sum(r["overhead_s"]
                                    for r in pred["ops"]), 6)}


def from_runs(folder: Path, only=()) -> tuple[dict[str, float], list[str]]:
    """Each lab's seconds from a runner's ``run.json`` (its last complete
    run, ``<lab>/``), and when the first and the last finished."""
    labs, when = {}, []
    for f in sorted(folder.glob("*/run.json")):
        r = json.loads(f.read_text())
        if r.get("status") == "ok" and f.parent.name == r["lab"] and (
                not only or r["lab"] in only):
            labs[r["lab"]] = r["seconds"]
            when.append(r["finished"])
    if not labs:
        raise SystemExit(f"no complete lab run (run.json) in {folder}")
    return labs, [min(when), max(when)]


PROBE = ("labkit.runs.tools.selftest", 2, {"mode": "ok"})
HOUR = {}      # lab -> the bare 2-rank launch's seconds around its run


def probe() -> float:
    """One bare 2-rank launch (``launch_s``'s), timed now: how fast this
    shared machine starts processes at this hour."""
    t = time.perf_counter()
    _launch(*PROBE)
    return time.perf_counter() - t


def run_labs(only=()) -> tuple[dict[str, float], list[str]]:
    """Each lab run by the runner on an empty compile cache, a bare
    launch (:func:`probe`) before the first and after each: the mean of
    the two around a lab goes to ``HOUR`` (the table's
    ``probe_launch_s``)."""
    with empty_compile_cache():   # Inductor compiles, as on a fresh clone
        return _run_labs(only)


def _run_labs(only) -> tuple[dict[str, float], list[str]]:
    import run_labs as R
    os.environ["PYTHONPATH"] = R.checkout_pythonpath()
    profile = R.load_profile("cpu")
    labs, start = {}, dt.datetime.now().isoformat(timespec="seconds")
    before = probe()
    for name, nb in R.discover().items():
        if only and name not in only:
            continue
        status, seconds, _ = R.run_lab(name, nb, "cpu",
                                       profile.get(name) or {},
                                       out=ROOT / "_build" / "labtime")
        after = probe()
        if status == "ok":
            labs[name] = round(seconds, 2)
            HOUR[name] = round((before + after) / 2, 3)
        before = after
        print(f"lab {name}: {status} in {seconds:.1f} s (bare launch "
              f"{HOUR.get(name, after):.1f} s)", flush=True)
    return labs, [start, dt.datetime.now().isoformat(timespec="seconds")]


def add_labs(only: list[str], runs: Path | None, out: Path) -> int:
    """``--only``: the named labs measured now, written into the table
    at ``out`` beside its labs and constants, and listed in ``apart``."""
    from run_labs import discover
    unknown = sorted(set(only) - set(discover()))
    if unknown or not out.exists():
        raise SystemExit(f"no lab {', '.join(unknown)} in labs/" if unknown
                         else f"{out} is missing: run python "
                         "scripts/bench_labtime.py first")
    table = json.loads(out.read_text())
    load = [os.getloadavg()[0]]
    labs, when = from_runs(runs, only) if runs else run_labs(only)
    missing = sorted(set(only) - set(labs))
    if missing:
        raise SystemExit(f"no complete run of {', '.join(missing)}; "
                         f"{out} unchanged")
    load.append(os.getloadavg()[0])
    table["labs"] = dict(sorted({**table["labs"], **labs}.items()))
    table["probe_launch_s"] = dict(sorted({
        **{k: v for k, v in table.get("probe_launch_s", {}).items()
           if k not in labs}, **HOUR}.items()))
    apart = [{**e, "labs": [n for n in e["labs"] if n not in labs]}
             for e in table.get("apart", [])]
    # the load and slowdown of the hour they ran; unknown for --from's
    table["apart"] = [e for e in apart if e["labs"]] + [{
        "labs": sorted(labs), "ran": when, "load_average": None if runs
        else [round(x, 2) for x in load],
        "slowdown": None if runs else round(slowdown(threads=1), 3)}]
    out.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{', '.join(f'{n} {s:.1f} s' for n, s in labs.items())}; "
          f"written to {out}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--from", dest="runs", type=Path,
                    help="a run_labs.py results folder (_build/labs/cpu): "
                    "the labs' seconds from its run.json files")
    ap.add_argument("--constants-only", action="store_true",
                    help="measure the constants, keep the table's labs")
    ap.add_argument("--only", action="append", default=[],
                    metavar="LAB", help="measure only this lab (again "
                    "for more) into the existing table, keeping the "
                    "other labs and the constants")
    ap.add_argument("--cpu-only", action="store_true",
                    help="measure the runs' CPU seconds into the existing "
                    "table, priced at its slowdown")
    ap.add_argument("--out", type=Path, default=TABLE)
    a = ap.parse_args(argv)
    if sum(map(bool, (a.only, a.constants_only, a.cpu_only))) > 1:
        ap.error("--only, --constants-only and --cpu-only: one at a time")
    if a.only:
        return add_labs(a.only, a.runs, a.out)
    if a.cpu_only:
        return add_cpu_constants(a.out)
    load = [os.getloadavg()[0]]
    t0 = time.perf_counter()
    old = {}
    if a.constants_only:
        old = json.loads(a.out.read_text())
        labs, when = old["labs"], old.get("labs_ran")
    else:
        labs, when = from_runs(a.runs) if a.runs else run_labs()
    const = constants()
    load.append(os.getloadavg()[0])
    table = {"what": "labkit.predict.labtime's CPU constants and the "
             "labs' measured seconds, by scripts/bench_labtime.py",
             "cores": len(os.sched_getaffinity(0)),
             "load_average": [round(x, 2) for x in load],
             "finished": dt.datetime.now().isoformat(timespec="seconds"),
             "labs_ran": when,
             "constants": const, "labs": labs,
             "probe_launch_s": dict(sorted(HOUR.items())) or
             old.get("probe_launch_s", {}),
             "roofline_step": roofline_step(),
             **({"apart": old["apart"]} if old.get("apart") else {})}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(table, indent=1) + "\n")
    print(json.dumps(const, indent=1))
    print(f"{len(labs)} labs; written to {a.out} in "
          f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
