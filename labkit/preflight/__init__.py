"""Is this machine what a lab profile needs? One table, before the meter runs.

    python -m labkit preflight                   # the cpu profile
    python -m labkit preflight --profile gpu8    # on a rented 8-GPU node
    python -m labkit preflight --profile gpu8 --json
    python -m labkit preflight --profile gpu8 --rehearse [NODE]   # any CPU

Each line is ``ok``, ``warn`` or ``fail`` with what was found, what the
profile needs and, when it is not ok, the fix. Checks: processes the
profile starts against CUDA GPUs (GPU profiles) or cores (cpu); GPU memory
against each lab's own need, a lab's expected OOM listed as expected
(:mod:`labkit.preflight.memory`); the
torch build and its CUDA / NCCL versions (gloo on CPU); DeepSpeed's ops
lab 4 needs (``ds_report``'s "compatible" column, asked from the same op
builders); the nvcc lab 9's Gemini JIT-builds with (CUDA_HOME, its major
against Colossal-AI's torch); the GPU interconnect (``nvidia-smi topo -m``); a short
all-reduce bus-bandwidth probe at two sizes (``labkit.runs.collectives``,
nccl against the profile's link preset, or gloo on CPU); free disk where
NVMe offload writes and host RAM for the offload cells.

Judged per lab: what only one lab needs (nvcc for lab 9's kernels, FP8
tensor cores for lab 14's real FP8 GEMM, host RAM and disk for what a
lab builds or writes) marks that lab ``skip`` with the reason, or names
its fallback (``fp8: emulated``), and the others run: the runner reads
:func:`summary`'s ``skip`` and ``fallback``. ``--rehearse`` judges a
described node (``labkit.rehearse.node``) from any machine.

Exit status: 0 all ok, 1 warnings or a skipped lab, 2 the run would
fail. A profile is a GPU profile unless it is named ``cpu`` (the labs' rule: ``on_gpu = profile !=
"cpu"``).

The package: ``check`` (the Check record, the folders' lines), ``gpu``,
``link``, ``memory`` and ``software``; they import ``check`` and the
launcher's lower modules, never this ``__init__``. Host RAM, disk and the
table are here.
"""
from __future__ import annotations

import json
import platform
import re
import shutil
from dataclasses import asdict
from pathlib import Path

from labkit.preflight.check import (RANK_KEYS, STATUS, Check,  # noqa: F401
                                    folder_checks,
                                    gb as _gb, lab_ranks, ranks_needed)
from labkit.preflight.gpu import (capability,  # noqa: F401
                                  check_capability, check_devices,
                                  gpu_lines, largest_model, no_gpus)
from labkit.preflight.link import (PROBE_OK, PROBE_SIZES,  # noqa: F401
                                   check_topology, interconnect, probe)
from labkit.preflight.software import (check_deepspeed, check_nvcc,
                                       check_torch)

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "labs" / "profiles"


NODE = "node"
"""A profile's one key that is not a lab: the node it is written for
(``gpus``: how many GPUs; absent on the CPU profile)."""


def _read_profile(name: str) -> dict:
    import yaml
    f = PROFILES / f"{name}.yaml"
    if not f.is_file():
        known = sorted(p.stem for p in PROFILES.glob("*.yaml"))
        raise ValueError(f"unknown profile {name!r}; known: {known}")
    return yaml.safe_load(f.read_text()) or {}


def load_profile(name: str) -> dict:
    """``labs/profiles/<name>.yaml``'s lab sections (its ``node`` apart:
    :func:`profile_gpus`); a clear error for an unknown name."""
    return {k: v for k, v in _read_profile(name).items() if k != NODE}


def profile_gpus(name: str) -> int | None:
    """The GPUs of the node profile ``name`` is written for (its
    ``node: {gpus: N}``; None where it names no node, as the CPU profile):
    the run plan prices only the labs whose launches fit them, as the
    runner skips the others."""
    gpus = (_read_profile(name).get(NODE) or {}).get("gpus")
    if gpus is None:
        return None
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        raise ValueError(f"{name}.yaml: node.gpus must be a whole number "
                         f">= 1, got {gpus!r}")
    return gpus


def too_big_for_node(name: str, profile: dict, labs=None) -> dict:
    """The labs (of ``labs``, default all) of GPU profile ``name`` whose
    largest launch needs more GPUs than its node has, with that need
    (:func:`lab_ranks` above :func:`profile_gpus`): the runner skips
    them there, so the run plan does not price them. None on the CPU
    profile (ranks share the cores) or a profile that names no node."""
    have = profile_gpus(name)
    if name == "cpu" or have is None:
        return {}
    need = {n: lab_ranks(profile.get(n) or {}) for n in (labs or profile)}
    return {n: k for n, k in need.items() if k > have}


def offload_bytes(profile: dict) -> tuple[float, float]:
    """(host RAM, NVMe bytes) the offload cells of lab 4 need on this node:
    every rank's offloaded model states (``labkit.predict.memory.ledger``)."""
    from labkit.predict.memory import ledger
    from labkit.predict.model.params import lab_params
    zero = profile.get("zero") or {}
    variants = zero.get("variants", [])
    if not any("offload" in v for v in variants) or "model" not in zero:
        return 0.0, 0.0
    n = zero.get("world_size", 1)
    led = ledger(lab_params(zero["model"]), n, "zero3",
                 "mixed" if zero.get("bf16") else "fp32", offload="params")
    ram = led.cpu_total * n
    return ram, (ram if zero.get("nvme_path") else 0.0)


def _free_ram() -> float:
    try:
        text = Path("/proc/meminfo").read_text()
        return int(re.search(r"MemAvailable:\s+(\d+)", text).group(1)) * 1024
    except (OSError, AttributeError):
        return float("nan")


def host_needs(profile: dict) -> dict[str, tuple[float, str]]:
    """Host RAM each lab builds on one node: ``{lab: (bytes, what)}``.
    Lab 4's offload cells keep every rank's offloaded model states there;
    lab 12's ranks build their model on the meta device and materialise
    only their shard, on their GPU (:mod:`labkit.training.meta_init`), so
    the node holds each rank's process and no parameter
    (:func:`labkit.predict.fit_runs.host_bytes`; the rehearsal counts the
    ranks' host bytes, :mod:`labkit.rehearse.world`)."""
    from labkit.predict.fit_runs import host_bytes
    out = {}
    ram, _ = offload_bytes(profile)
    if ram:
        out["zero"] = (ram, "offloaded model states")
    f = profile.get("fit") or {}
    if isinstance(f.get("model"), dict) and f.get("profile", "cpu") != "cpu":
        h = host_bytes(f)
        out["fit"] = (h["total"], f"{h['ranks']} ranks, each its process "
                      f"({_gb(h['process_per_rank'])}) and "
                      f"{_gb(h['model_per_rank'])} of model: built on "
                      "meta, materialised sharded on the GPU")
    return out


def disk_needs(profile: dict) -> dict[str, tuple[float, str]]:
    """What the run writes, per lab: lab 4's NVMe offload (every rank's
    states) and lab 8's checkpoints (fp32 weights and Adam's two moments,
    12 bytes a parameter, one per ``every`` steps, again for DeepSpeed's
    engine when it runs)."""
    from labkit.predict.model.params import lab_params
    out = {}
    _, nvme = offload_bytes(profile)
    if nvme:
        out["zero"] = (nvme, "NVMe offload")
    c = profile.get("checkpoint") or {}
    if isinstance(c.get("model"), dict) and c.get("every"):
        saves = c.get("steps", 0) // c["every"] * (2 if c.get("deepspeed")
                                                   else 1)
        out["checkpoint"] = (12 * lab_params(c["model"]) * saves,
                             f"{saves} checkpoints of weights and Adam")
    return out


def _per_lab(name: str, needs: dict, have: float, where: str,
             judge: bool, fix: str) -> list[Check]:
    """One line for the run, then one ``skip`` line per lab whose need
    exceeds ``have`` (that lab is skipped, the others run)."""
    total = sum(b for b, _ in needs.values())
    need = ", ".join(f"lab {lab} {_gb(b)} ({what})" for lab, (b, what)
                     in needs.items()) or "no lab keeps data there"
    short = {lab: v for lab, v in needs.items() if judge and v[0] > have}
    head = Check(name, "ok", f"{_gb(have)} {where}" if judge else
                 "not judged (a rehearsal: the node's is not described)",
                 f"{_gb(total)}: {need}")
    return [head, *(Check(name, "skip", f"{_gb(have)} {where}",
                          f"{_gb(b)} for lab {lab} ({what})", fix, lab=lab)
                    for lab, (b, what) in short.items())]


def check_host(profile: dict, rehearsed: bool = False) -> list[Check]:
    """Host RAM and disk lines, per lab (a rehearsal states the needs: the
    node's RAM and disk are not described)."""
    nvme = (profile.get("zero") or {}).get("nvme_path") or str(ROOT / "_build")
    where = Path(nvme)
    while not where.exists():
        where = where.parent
    free = shutil.disk_usage(where).free
    return [*_per_lab("host ram", host_needs(profile), _free_ram(),
                      "available", not rehearsed,
                      "a node with more RAM, or drop the offload variants"),
            *_per_lab("disk", disk_needs(profile), free, f"free at {where}",
                      not rehearsed, "point zero.nvme_path and the results "
                      "at a larger local NVMe drive")]


def rehearsed_run(name: str, node: str | None = None) -> list[Check]:
    """Preflight against a described node (``--rehearse [NODE]``), on any
    machine: its GPUs, capability and each lab's memory
    (:func:`gpu_lines`), this environment's software and toolchain, and
    the per-lab host and disk needs; no probe, no topology."""
    from labkit.rehearse.node import describe
    profile = load_profile(name)
    n = describe(node)
    checks = [Check("node", "ok", f"{n} (rehearsed)", "a described node"),
              *gpu_lines(profile, n.gpus, n.gpu, n.memory),
              *check_deepspeed(profile), check_toolchain()]
    return checks + check_nvcc(name, profile) + check_host(profile, True)


def check_toolchain(env=None) -> Check:
    """What the labs compile with (Triton, DeepSpeed's JIT ops,
    Colossal-AI's kernels): Python's headers, a C compiler and ninja on
    the ranks' PATH (the launcher puts this environment's bin first)."""
    import os
    import sys
    import sysconfig
    from labkit.launch import venv_path
    path = venv_path(sys.executable, (env or os.environ).get("PATH", ""))
    header = Path(sysconfig.get_paths()["include"]) / "Python.h"
    missing = [t for t in ("cc", "ninja") if not shutil.which(t, path=path)]
    missing += [] if header.is_file() else [f"{header}"]
    return Check("toolchain", "fail" if missing else "ok",
                 "missing: " + ", ".join(missing) if missing else
                 "Python.h, cc, ninja", "Python.h, cc, ninja (compiled "
                 "kernels of labs 4, 9, 12)",
                 "sh scripts/node_setup.sh (or make node-setup)"
                 if missing else "")


def run(name: str, with_probe: bool = True) -> list[Check]:
    profile = load_profile(name)
    checks = [*check_devices(name, profile), *check_torch(name),
              *check_deepspeed(profile), *check_topology(name)]
    checks += folder_checks(name)
    if with_probe and not any(c.status == "fail" for c in checks):
        checks += probe(name, profile)
    elif with_probe:
        checks.append(Check("busbw probe", "fail", "not run",
                            "the lines above ok"))
    # after the probe: lab 9's compiler does not gate NCCL's bandwidth
    tools = [check_toolchain()] if name != "cpu" else []
    return checks + tools + check_nvcc(name, profile) + check_host(profile)


def summary(checks: list[Check]) -> dict:
    """What a results record carries: status, the lines not ok, the labs
    to skip (``{lab: reason}``) and the parameters a lab falls back to
    (``{lab: {param: value}}``); the runner reads the last two."""
    worst = max((c.status for c in checks), key=STATUS.get, default="ok")
    first = next((c for c in checks if c.status == worst != "ok"), None)
    skip, fallback = {}, {}
    for c in checks:
        if c.status == "skip" and c.lab:
            skip.setdefault(c.lab, f"{c.name}: {c.found}; {c.fix}")
        if c.fallback and c.lab:
            fallback.setdefault(c.lab, {}).update(c.fallback)
    return {"status": worst, "exit": STATUS[worst],
            "reason": first and (first.fix or f"{first.name}: {first.found}"),
            "problems": [f"{c.name}: {c.found} (need {c.need})"
                         for c in checks if c.status != "ok"],
            "skip": skip, "fallback": fallback}


def table(checks: list[Check]) -> str:
    rows = [(c.status.upper(), c.name, c.found, c.need,
             (f"lab {c.lab}: " if c.lab else "") + c.fix
             if c.status != "ok" else "") for c in checks]
    heads = ("status", "check", "found", "needs", "fix")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in
              enumerate(heads[:-1])]
    line = lambda r: "  ".join(f"{v:{w}s}" for v, w in zip(r, widths)) + (
        "  " + r[-1] if r[-1] else "")
    return "\n".join([line(heads), *(line(r) for r in rows)])


def add_arguments(p) -> None:
    p.add_argument("--profile", default="cpu")
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-probe", action="store_true",
                   help="skip the bus-bandwidth probe (no process started)")
    p.add_argument("--rehearse", nargs="?", const="h100x8", metavar="NODE",
                   help="judge a described node (labkit/rehearse/nodes, "
                   "or an nvidia-smi file; default h100x8) from any "
                   "machine: no GPU, no probe")


def main(args) -> int:
    checks = (rehearsed_run(args.profile, args.rehearse) if args.rehearse
              else run(args.profile, with_probe=not args.no_probe))
    s = summary(checks)
    if args.json:
        print(json.dumps({"profile": args.profile, "host": platform.node(),
                          "checks": [asdict(c) for c in checks], **s},
                         indent=1))
    else:
        print(f"preflight for profile {args.profile} on {platform.node()}")
        print(table(checks))
        print(f"=> {s['status'].upper()}" + (
            f": {s['reason']}" if s["reason"] else ""))
    return s["exit"]
