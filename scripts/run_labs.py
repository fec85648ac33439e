"""Execute the lab notebooks with papermill under a parameter profile.

    python scripts/run_labs.py --profile cpu                 # every lab
    python scripts/run_labs.py --profile gpu8 --only memory  # one lab
    python scripts/run_labs.py --profile gpu1                # one GPU
    python scripts/run_labs.py --profile gpu8 --plan --price-per-hour 24
    python scripts/run_labs.py --profile gpu8 --rehearse     # on any CPU
    python scripts/run_labs.py --profile gpu8 --rehearse --cells all

Parameters come from ``labs/profiles/<profile>.yaml`` (one section per lab,
keyed by the lab's name without its number). For each lab the executed
notebook and its ``results.json`` go to ``_build/labs/<profile>/<lab>/``,
which only ever holds a complete run (``labkit.results.labruns``): a run writes
into a fresh ``<lab>.<stamp>.running/`` and is renamed ``<lab>/`` when it
completed; the earlier run is kept, renamed with its time stamp, never
overwritten. A lab that failed is kept as ``<lab>.<stamp>.failed``, one
stopped by Ctrl-C, SIGTERM or SIGHUP as ``<lab>.<stamp>.interrupted`` (a
SIGKILLed run is labelled so by the next runner, bundle or book build);
neither replaces the last complete run. Killing the runner ends the lab's
kernel and every process it launched (``labkit.launch``).
A failing lab does not stop the others; the summary table gives each lab's
status and seconds, and the exit status is 1 if any lab failed. On a GPU
profile a lab whose parameters need more GPUs than are visible (its world
sizes: :func:`gpus_needed`) is not started: it is listed as ``skipped``
with a "needs >= N GPUs" note, not as a failure.

First the runner checks the machine (``python -m labkit preflight``) and
stops, exit status 2, if the run would fail; a lab only preflight says
cannot run here (nvcc for lab 9, host RAM, disk) is listed as "skipped
(reason)", and a lab with a fallback runs with it (lab 14's ``fp8:
emulated`` below sm_89). The launches get the profile's heartbeat stall
limit (``labkit.launch.heartbeat.profile_stall_s``). ``--plan`` prints
each lab's estimated minutes and cost (``labkit.predict.labtime``) and
runs nothing; on a GPU profile it prices only the labs that fit the
profile's node (``node: {gpus: N}``) and names the others; after a run,
``run.json`` holds the estimate beside the actual minutes.
Executed notebooks and ``run.json`` carry the run's provenance
(``labkit.results.provenance``); ``results_dir`` is passed relative to the
project, so no absolute path of this checkout reaches the book.

One runner per checkout and profile at a time (``labkit.results.runlock``: a lock
in ``<out>/<profile>/`` naming its holder's pid and command): a second
runner refuses in one line, exit status 2, or waits with ``--wait``. A
full or read-only results folder is said in one line (``labkit.disk``)
before any lab starts; a lab that fails on one, or in any other way, is
listed as FAILED and the runner goes on to the next lab and its summary.
What papermill, nbclient and asyncio log in the runner goes to
``<out>/<profile>/runner.log`` (``labkit.results.labfaults.runner_log``), not over
the summary: each lab's status and note already say what failed.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import datetime as dt
import json
import signal
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from labkit import lazy_grammar  # noqa: E402,F401  (before papermill)
from labkit import disk, preflight
from labkit.results import labruns, provenance  # noqa: E402
from labkit.results import labfaults, resultsfile, runlock  # noqa: E402
from labkit.launch import (checkout_pythonpath,  # noqa: E402
                           cuda_device_count)
from labkit.predict import labtime  # noqa: E402

LABS = ROOT / "labs"
OUT = ROOT / "_build" / "labs"
BUDGET_S = {"cpu": 90.0}  # per lab, on 2 cores (DEVELOPERS.md)


def lab_name(path: Path) -> str:
    """``labs/01_memory.ipynb`` -> ``memory``."""
    stem = path.stem
    head, _, tail = stem.partition("_")
    return tail if head.isdigit() and tail else stem


@contextlib.contextmanager
def empty_compile_cache():
    """A fresh, empty ``TORCHINDUCTOR_CACHE_DIR`` for what runs inside the
    block (kernels, torchrun ranks: they inherit it), as a fresh clone
    meets it (``.cache/`` is not in git); the caller's setting after."""
    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="inductor-cold-") as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        try:
            yield cache
        finally:
            if before is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = before


def discover(labs: Path = LABS) -> dict[str, Path]:
    return {lab_name(p): p for p in sorted(labs.glob("[0-9]*_*.ipynb"))}


def _span(lo: float, hi: float, fmt: str = "{:.1f}") -> str:
    return fmt.format(lo) if abs(hi - lo) < 1e-9 else \
        f"{fmt.format(lo)}-{fmt.format(hi)}"


def plan(profile_name: str, profile: dict, chosen: list[str],
         price_per_hour: float | None) -> dict[str, labtime.Estimate]:
    """Print each lab's estimated minutes (a low-high range on a GPU
    profile), the node's set-up and the cost; start nothing. A lab whose
    launches need more GPUs than the profile's node has (``node: {gpus:
    N}``) is named, not priced: the runner skips it there. Every chosen
    lab's estimate is returned (``run.json`` keeps it)."""
    gpu = profile_name != "cpu"
    est = labtime.plan(profile, gpu, chosen)
    skips = preflight.too_big_for_node(profile_name, profile, chosen)
    priced = {n: e for n, e in est.items() if n not in skips}
    price = f"cost (${price_per_hour:g}/h)" if price_per_hour is not None \
        else "cost"

    def dollars(lo, hi):
        c = labtime.cost(lo / 60, price_per_hour)
        return "" if c is None else "$" + _span(
            c, labtime.cost(hi / 60, price_per_hour), "{:,.2f}")

    print(f"{'lab':18s} {'launches':>8s} {'runs':>5s} "
          + " ".join(f"{k:>11s}" for k in labtime.PARTS)
          + f" {'minutes':>11s} {price:>17s}")
    for n, e in priced.items():
        print(f"{n:18s} {e.launches:8d} {e.runs:5d} " + " ".join(
            f"{_span(lo / 60, hi / 60, '{:.2f}'):>11s}"
            for lo, hi in e.parts.values())
            + f" {_span(e.low / 60, e.high / 60):>11s} "
            f"{dollars(e.low, e.high):>17s}")
    lo, hi = labtime.setup(gpu)
    if hi:
        print(f"{'node set-up':18s} {'':>8s} {'':>5s} " + " " * 48
              + f"{_span(lo / 60, hi / 60):>11s} {dollars(lo, hi):>17s}")
    lo += sum(e.low for e in priced.values())
    hi += sum(e.high for e in priced.values())
    print(f"{'total':18s} {'':>8s} {'':>5s} " + " " * 48
          + f"{_span(lo / 60, hi / 60):>11s} {dollars(lo, hi):>17s}")
    if skips:
        print("not priced, more GPUs than the node's "
              f"{preflight.profile_gpus(profile_name)}: " + ", ".join(
                  f"{n} (needs {k})" for n, k in skips.items()))
    if gpu:
        print(f"(minutes, low-high: the named defaults of "
              f"labkit.predict.labtime.machine at both ends; steps at "
              f"step_time on the {labtime.M.GPU} data sheet; largest "
              f"uncertainty: {labtime.largest_uncertainty(priced, gpu)}; "
              "nothing was run)")
    else:
        t = labtime.M.measured()
        cpu_s = (t.get("cpu_s_measured") or {}).get("at")
        print(f"(minutes; every part priced by the constants "
              f"scripts/bench_labtime.py measured at {t['finished']}"
              + (f", the runs' CPU seconds at {cpu_s}" if cpu_s else "")
              + f", on {t['cores']} cores (run it on your machine for its "
              "own); nothing was run)")
    return est


def load_profile(profile: str) -> dict:
    try:
        return preflight.load_profile(profile)
    except ValueError as e:
        raise SystemExit(str(e)) from None


keep_previous = labruns.keep_previous


def check_profile(name: str, profile: dict, chosen: list[str]) -> str:
    """Every value of the chosen labs' sections by its parameter's rule
    (``labkit.checks.params``: the table the notebooks' own checks read),
    before any process starts: the first bad one in a line, else ''."""
    from labkit.checks import parse
    for lab in chosen:
        section = profile.get(lab) or {}
        if not isinstance(section, dict):
            return f"{name}.yaml: {lab}: not a mapping of parameters"
        try:
            parse({**section, "profile": name})
        except ValueError as e:
            return f"{name}.yaml, lab {lab}: {e}"
    return ""


def gpus_needed(params: dict) -> int:
    """Ranks (one GPU each) the lab's largest launch asks for."""
    return preflight.lab_ranks(params)


def has_cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def skip_gpu_cells(src: Path, dest: Path) -> int:
    """Copy a notebook, turning cells tagged ``gpu`` into a shown note.

    Without a GPU those cells cannot run (nbval skips them the same way);
    the executed notebook still shows their code, marked as not run.
    """
    import nbformat
    nb = nbformat.read(src, as_version=4)
    n = 0
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and "gpu" in cell.metadata.get("tags", []):
            note = nbformat.v4.new_markdown_cell(
                "*Not run here: this cell needs CUDA GPUs (tag `gpu`); "
                "run the lab with `--profile gpu1` (one GPU) or "
                "`--profile gpu8` on a GPU node.*\n\n"
                "```python\n" + cell.source + "\n```")
            note.metadata["tags"] = ["gpu", "skipped"]
            nb.cells[i] = note
            n += 1
    nbformat.write(nb, dest)
    return n


def run_lab(name: str, nb: Path, profile: str, params: dict,
            out: Path = OUT, estimate: float | None = None,
            checks: dict | None = None) -> tuple[str, float, str]:
    import papermill as pm
    labs = nb.parent
    disk.check_writable(out / profile)   # "disk full at ..." before it runs
    with disk.said(out / profile):
        out_dir = labruns.start(out / profile, name)
    try:
        if not has_cuda():
            src = out_dir / ("input-" + nb.name)
            skip_gpu_cells(nb, src)
            nb_in = src
        else:
            nb_in = nb
        parameters = {**params, "profile": profile,
                      "results_dir": os.path.relpath(out_dir, labs)}
        (out_dir / "parameters.json").write_text(json.dumps(parameters,
                                                            indent=1))
    except OSError as e:   # a full disk before the lab began: not current
        labruns.finish(out_dir, "failed")
        raise disk.as_disk_error(e, out_dir) from None
    t0 = time.perf_counter()
    status, detail = "ok", ""
    try:
        for attempt in (1, 2):
            try:
                pm.execute_notebook(
                    str(nb_in), str(out_dir / nb.name),
                    parameters=parameters, cwd=str(labs),
                    kernel_name="python3", progress_bar=False,
                    request_save_on_cell_execute=True,
                    kernel_manager_class=labfaults.quiet_kernel(
                        out_dir / "kernel-stderr.log"))
                break
            except Exception as e:  # noqa: BLE001 -- one retry, named
                if attempt == 2 or not labfaults.port_taken(e, out_dir):
                    raise
                print(f"{name}: the kernel's port was taken before it "
                      "bound it; starting it again", flush=True)
        resultsfile.read(out_dir / "results.json")   # its schema
    except KeyboardInterrupt:   # Ctrl-C, SIGTERM, SIGHUP (see main)
        labfaults.remove_connection_files(out_dir)
        _write_run_json(out_dir, nb.name, name, profile, "interrupted",
                        time.perf_counter() - t0, "stopped by a signal",
                        estimate, checks)
        kept, _ = labruns.finish(out_dir, "interrupted")
        raise KeyboardInterrupt(f"{name}: interrupted, kept in {kept.name}")
    except resultsfile.ResultsError as e:
        status, detail = "FAILED", f"the lab's {e}"
    except Exception as e:  # papermill's PapermillExecutionError and friends
        status = "FAILED"
        detail = labfaults.disk_fault(e, out_dir) or labfaults.first_line(e)
    labfaults.remove_connection_files(out_dir)   # ports and HMAC key
    seconds = time.perf_counter() - t0
    budget = BUDGET_S.get(profile)
    if status == "ok" and budget and seconds > budget:
        detail = f"over the {budget:.0f} s budget"
    if nb_in != nb:
        nb_in.unlink(missing_ok=True)
    try:
        if status == "ok":   # the notebook names the folder it will be in
            for f in (out_dir / nb.name, out_dir / "parameters.json"):
                if f.exists():
                    f.write_text(f.read_text().replace(
                        os.path.relpath(out_dir, labs),
                        os.path.relpath(out_dir.with_name(name), labs)))
        _write_run_json(out_dir, nb.name, name, profile, status, seconds,
                        detail, estimate, checks)
    except Exception as e:  # a full disk: the run is not complete
        status, detail = "FAILED", (labfaults.disk_fault(e, out_dir)
                                    or f"run.json: {labfaults.first_line(e)}")
    final, previous = labruns.finish(out_dir,
                                     "ok" if status == "ok" else "failed")
    if status != "ok":
        detail = (detail + "; " if detail else "") + (
            f"kept in {final.name}, not current")
    if previous:
        detail = (detail + "; " if detail else "") + f"previous run kept in {previous.name}"
    return status, seconds, detail


def _write_run_json(out_dir: Path, notebook: str, name: str, profile: str,
                    status: str, seconds: float, detail: str, estimate,
                    checks) -> None:
    """Provenance into the executed notebook, then run.json, written last
    (and atomically): a folder without it is not a finished run."""
    prov = provenance.collect(profile, preflight=checks)
    executed = out_dir / notebook
    if executed.exists():
        provenance.stamp_notebook(executed, prov)
    minutes = seconds / 60
    sums = resultsfile.checksums(out_dir, ("results.json", notebook,
                                           "parameters.json"))
    tmp = out_dir / "run.json.tmp"
    tmp.write_text(json.dumps(
        {"lab": name, "profile": profile, "status": status, "sha256": sums,
         "seconds": round(seconds, 2), "detail": detail,
         "finished": dt.datetime.now().isoformat(timespec="seconds"),
         "minutes": {"predicted": estimate, "measured": round(minutes, 3),
                     "ratio": (minutes / estimate if estimate else None)},
         "provenance": prov}, indent=1))
    os.replace(tmp, out_dir / "run.json")


def _interrupt(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv=None) -> int:
    os.environ["PYTHONPATH"] = checkout_pythonpath()  # kernels: this labkit
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--only", action="append", default=[],
                    help="run just this lab (name, e.g. 'memory'); repeatable")
    ap.add_argument("--plan", action="store_true",
                    help="print estimated minutes and cost; run nothing")
    ap.add_argument("--price-per-hour", type=float,
                    help="USD per hour of the node, for --plan's cost")
    ap.add_argument("--out", type=Path, default=OUT,
                    help="results folder (default _build/labs)")
    ap.add_argument("--labs", type=Path, default=LABS,
                    help="folder of lab notebooks (default labs/)")
    ap.add_argument("--skip-preflight", action="store_true")
    ap.add_argument("--wait", action="store_true",
                    help="wait for another runner of this profile to end "
                    "(default: refuse)")
    ap.add_argument("--rehearse", action="store_true",
                    help="rehearse the profile on this CPU (fake tensors, "
                    "NCCL's rules; labkit.rehearse); run nothing for real")
    ap.add_argument("--node", help="with --rehearse: a recorded nvidia-smi "
                    "description (labkit/rehearse/nodes) or a file; "
                    "default h100x8 (8 x H100 80GB)")
    ap.add_argument("--cells", action="append", default=[],
                    help="with --rehearse: execute this lab's notebook, "
                    "every cell (repeat; 'all': every notebook)")
    a = ap.parse_args(argv)
    if a.price_per_hour is not None and not a.price_per_hour >= 0:
        ap.error(f"--price-per-hour must be >= 0, got {a.price_per_hour:g}")
    labs = discover(a.labs)
    try:
        profile = preflight.load_profile(a.profile)
    except ValueError as e:
        ap.error(str(e))
    unknown = [n for n in a.only if n not in labs]
    if unknown:
        ap.error(f"unknown lab(s) {unknown}; known: {sorted(labs)}")
    missing = sorted(set(profile) - set(labs))
    if missing and a.labs == LABS:
        raise SystemExit(f"{a.profile}.yaml names labs that do not exist: {missing}")
    chosen = a.only or list(labs)
    bad = check_profile(a.profile, profile, chosen)
    if bad:
        print(f"run_labs: {bad}", file=sys.stderr)
        return 2
    if a.rehearse:
        from labkit.rehearse.run import from_runner
        return from_runner(a.profile, a.node, a.only, a.cells)
    est = plan(a.profile, profile, chosen, a.price_per_hour)
    if a.plan:
        return 0
    where = a.out / a.profile
    try:
        disk.check_writable(where)
        with runlock.hold(where, wait=a.wait, say=lambda line: print(
                line, file=sys.stderr, flush=True)):
            return _locked(a, profile, chosen, labs, est)
    except (runlock.RunnerBusy, ValueError, OSError) as e:
        said = disk.describe(e) if isinstance(e, OSError) else None
        print(f"run_labs: {said or e}", file=sys.stderr)
        return 2


def _locked(a, profile, chosen, labs, est) -> int:
    """The run itself, under the runner's lock."""
    checks = None
    if not a.skip_preflight:
        found = preflight.run(a.profile)
        checks = preflight.summary(found)
        os.environ["LABKIT_PREFLIGHT"] = json.dumps(checks)  # for Results
        print(preflight.table(found), flush=True)
        if checks["exit"] == 2:
            print(f"preflight failed: {'; '.join(checks['problems'])}; "
                  "fix it, or pass --skip-preflight", file=sys.stderr)
            return 2
    labfaults.runner_log(a.out / a.profile / "runner.log")
    for run in labruns.label_interrupted(a.out / a.profile):
        print(labruns.said(run))
    handlers = {sig: signal.signal(sig, _interrupt)
                for sig in (signal.SIGTERM, signal.SIGHUP)}
    rows = []
    visible = cuda_device_count()
    # a rank may hold the GIL longer on a GPU (NCCL's set-up, Triton):
    # the labs' launches get the profile's stall limit, unless one is set
    from labkit.launch import heartbeat
    stall = os.environ.get("LABKIT_STALL_S")
    os.environ["LABKIT_STALL_S"] = stall or str(
        heartbeat.profile_stall_s(a.profile))
    try:
        _run_all(a, chosen, profile, labs, est, checks, visible, rows)
    except KeyboardInterrupt as e:
        print(f"\nstopped: {e or 'interrupted'}; every lab's last "
              "complete run is kept as "
              f"<lab>/ in {a.out / a.profile}", file=sys.stderr)
        return 130
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        if stall is None:
            os.environ.pop("LABKIT_STALL_S", None)
    print(f"\n{'lab':24s} {'status':8s} {'seconds':>8s}  note")
    for name, status, seconds, detail in rows:
        print(f"{name:24s} {status:8s} {seconds:8.1f}  {detail}")
    failed = [r for r in rows if r[1] not in ("ok", "skipped")]
    skipped = [r for r in rows if r[1] == "skipped"]
    print(f"\n{len(rows) - len(failed) - len(skipped)} passed, "
          f"{len(failed)} failed, {len(skipped)} skipped" + "".join(
              f"\n  {r[0]}: skipped ({r[3]})" for r in skipped)
          + f"\n(executed notebooks in {a.out / a.profile})")
    return 1 if failed else 0


def _run_all(a, chosen, profile, labs, est, checks, visible, rows) -> None:
    for i, name in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}] {name} ({a.profile}) ...", flush=True)
        need = gpus_needed(profile.get(name) or {})
        judged = checks or {}     # preflight's per-lab skips and fallbacks
        params = {**(profile.get(name) or {}),
                  **judged.get("fallback", {}).get(name, {})}
        if a.profile != "cpu" and need > visible:
            status, seconds = "skipped", 0.0
            detail = (f"needs >= {need} GPUs, {visible} visible: run it "
                      "with --profile cpu here, or on a bigger machine")
        elif name in judged.get("skip", {}):
            status, seconds = "skipped", 0.0
            detail = f"preflight: {judged['skip'][name]}"
        else:
            t0 = time.perf_counter()
            try:
                status, seconds, detail = run_lab(
                    name, labs[name], a.profile, params,
                    a.out, round(est[name].minutes, 3), checks)
            except (OSError, ValueError, RuntimeError) as e:  # the next lab
                status, seconds = "FAILED", time.perf_counter() - t0
                detail = (disk.describe(e) if isinstance(e, OSError) else
                          None) or " ".join(str(e).split())[:300]
        print(f"[{i}/{len(chosen)}] {name}: {status} in {seconds:.1f} s"
              + (f" -- {detail}" if detail else ""), flush=True)
        rows.append((name, status, seconds, detail))


if __name__ == "__main__":
    sys.exit(main())
