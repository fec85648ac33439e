"""Execute the lab notebooks with papermill under a parameter profile.

    python scripts/run_labs.py --profile cpu                 # every lab
    python scripts/run_labs.py --profile gpu8 --only memory  # one lab
    python scripts/run_labs.py --profile gpu1                # one GPU

Parameters come from ``labs/profiles/<profile>.yaml`` (one section per lab,
keyed by the lab's name without its number). For each lab the executed
notebook and its ``results.json`` go to ``_build/labs/<profile>/<lab>/``; an
earlier run there is kept, renamed with its time stamp, never overwritten.
A failing lab does not stop the others; the summary table gives each lab's
status and seconds, and the exit status is 1 if any lab failed. On a GPU
profile a lab whose parameters need more GPUs than are visible (its world
sizes: :func:`gpus_needed`) is not started: it is listed as ``skipped``
with a "needs >= N GPUs" note, not as a failure.
"""
from __future__ import annotations

import argparse
import os
import datetime as dt
import json
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from labkit.launch import (checkout_pythonpath,  # noqa: E402
                           cuda_device_count)

LABS = ROOT / "labs"
OUT = ROOT / "_build" / "labs"
BUDGET_S = {"cpu": 90.0}  # per lab, on 2 cores (DEVELOPERS.md)


def lab_name(path: Path) -> str:
    """``labs/01_memory.ipynb`` -> ``memory``."""
    stem = path.stem
    head, _, tail = stem.partition("_")
    return tail if head.isdigit() and tail else stem


def discover() -> dict[str, Path]:
    return {lab_name(p): p for p in sorted(LABS.glob("[0-9]*_*.ipynb"))}


def load_profile(profile: str) -> dict:
    f = LABS / "profiles" / f"{profile}.yaml"
    if not f.exists():
        known = sorted(p.stem for p in (LABS / "profiles").glob("*.yaml"))
        raise SystemExit(f"unknown profile {profile!r}; known: {known}")
    return yaml.safe_load(f.read_text()) or {}


def keep_previous(folder: Path) -> Path | None:
    """Move an earlier run aside as ``<lab>.<timestamp>`` and say where."""
    if not folder.exists():
        return None
    stamp = dt.datetime.fromtimestamp(folder.stat().st_mtime)
    dest = folder.with_name(f"{folder.name}.{stamp:%Y%m%d-%H%M%S}")
    n = 1
    while dest.exists():
        dest = folder.with_name(f"{folder.name}.{stamp:%Y%m%d-%H%M%S}-{n}")
        n += 1
    folder.rename(dest)
    return dest


GPU_COUNT_KEYS = ("world_size", "world_sizes", "tp_sizes", "stages",
                  "sweep_stages")


def gpus_needed(params: dict) -> int:
    """Ranks (one GPU each) the lab's largest launch asks for."""
    n = 1
    for key in GPU_COUNT_KEYS:
        v = params.get(key)
        for x in (v if isinstance(v, list) else [v]):
            if isinstance(x, int) and not isinstance(x, bool):
                n = max(n, x)
    return n


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
            out: Path = OUT) -> tuple[str, float, str]:
    import papermill as pm
    out_dir = out / profile / name
    previous = keep_previous(out_dir)
    out_dir.mkdir(parents=True)
    if not has_cuda():
        src = out_dir / ("input-" + nb.name)
        skip_gpu_cells(nb, src)
        nb_in = src
    else:
        nb_in = nb
    parameters = {**params, "profile": profile, "results_dir": str(out_dir)}
    (out_dir / "parameters.json").write_text(json.dumps(parameters, indent=1))
    t0 = time.perf_counter()
    status, detail = "ok", ""
    try:
        pm.execute_notebook(str(nb_in), str(out_dir / nb.name),
                            parameters=parameters, cwd=str(LABS),
                            kernel_name="python3", progress_bar=False,
                            request_save_on_cell_execute=True)
        if not (out_dir / "results.json").exists():
            status, detail = "FAILED", "the lab wrote no results.json"
    except Exception as e:  # papermill's PapermillExecutionError and friends
        status = "FAILED"
        detail = str(e).strip().splitlines()[-1] if str(e).strip() else repr(e)
    seconds = time.perf_counter() - t0
    budget = BUDGET_S.get(profile)
    if status == "ok" and budget and seconds > budget:
        detail = f"over the {budget:.0f} s budget"
    if nb_in != nb:
        nb_in.unlink()
    if previous:
        detail = (detail + "; " if detail else "") + f"previous run kept in {previous.name}"
    (out_dir / "run.json").write_text(json.dumps(
        {"lab": name, "profile": profile, "status": status,
         "seconds": round(seconds, 2), "detail": detail,
         "finished": dt.datetime.now().isoformat(timespec="seconds")}, indent=1))
    return status, seconds, detail


def main(argv=None) -> int:
    os.environ["PYTHONPATH"] = checkout_pythonpath()  # kernels: this labkit
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--only", action="append", default=[],
                    help="run just this lab (name, e.g. 'memory'); repeatable")
    a = ap.parse_args(argv)
    labs = discover()
    profile = load_profile(a.profile)
    unknown = [n for n in a.only if n not in labs]
    if unknown:
        raise SystemExit(f"unknown lab(s) {unknown}; known: {sorted(labs)}")
    missing = sorted(set(profile) - set(labs))
    if missing:
        raise SystemExit(f"{a.profile}.yaml names labs that do not exist: {missing}")
    chosen = a.only or list(labs)
    rows = []
    visible = cuda_device_count()
    for i, name in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}] {name} ({a.profile}) ...", flush=True)
        need = gpus_needed(profile.get(name) or {})
        if a.profile != "cpu" and need > visible:
            status, seconds = "skipped", 0.0
            detail = (f"needs >= {need} GPUs, {visible} visible: run it "
                      "with --profile cpu here, or on a bigger machine")
        else:
            status, seconds, detail = run_lab(name, labs[name], a.profile,
                                              profile.get(name) or {})
        print(f"[{i}/{len(chosen)}] {name}: {status} in {seconds:.1f} s"
              + (f" -- {detail}" if detail else ""), flush=True)
        rows.append((name, status, seconds, detail))
    print(f"\n{'lab':24s} {'status':8s} {'seconds':>8s}  note")
    for name, status, seconds, detail in rows:
        print(f"{name:24s} {status:8s} {seconds:8.1f}  {detail}")
    failed = [r for r in rows if r[1] not in ("ok", "skipped")]
    print(f"\n{len(rows) - len(failed)} passed, {len(failed)} failed"
          f" (executed notebooks in {OUT / a.profile})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
