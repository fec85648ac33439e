"""Is this machine what a lab profile needs? One table, before the meter runs.

    python -m labkit preflight                   # the cpu profile
    python -m labkit preflight --profile gpu8    # on a rented 8-GPU node
    python -m labkit preflight --profile gpu8 --json

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

Exit status: 0 all ok, 1 warnings, 2 a lab would fail. A profile is a GPU
profile unless it is named ``cpu`` (the labs' rule: ``on_gpu = profile !=
"cpu"``).

Files: ``preflight_check.py`` (a line; ranks a profile asks for),
``preflight_gpu.py`` and ``preflight_memory.py`` (GPUs, memory per lab),
``preflight_software.py`` (torch, DeepSpeed), ``preflight_link.py``
(interconnect, probe); host RAM, disk and the table are here.

The package: ``check`` (the Check record), ``gpu``, ``link``, ``memory``
and ``software``; they import ``check`` and the launcher's lower modules,
never this ``__init__``.
"""
from __future__ import annotations

import json
import platform
import re
import shutil
from dataclasses import asdict
from pathlib import Path

from labkit.preflight.check import (RANK_KEYS, STATUS, Check,  # noqa: F401
                                    gb as _gb, lab_ranks, ranks_needed)
from labkit.preflight.gpu import (check_devices, gpu_lines,  # noqa: F401
                                  largest_model, no_gpus)
from labkit.preflight.link import (PROBE_OK, PROBE_SIZES,  # noqa: F401
                                   check_topology, interconnect, probe)
from labkit.preflight.software import (check_deepspeed, check_nvcc,
                                       check_torch)

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "labs" / "profiles"


def load_profile(name: str) -> dict:
    """``labs/profiles/<name>.yaml``; a clear error for an unknown name."""
    import yaml
    f = PROFILES / f"{name}.yaml"
    if not f.is_file():
        known = sorted(p.stem for p in PROFILES.glob("*.yaml"))
        raise ValueError(f"unknown profile {name!r}; known: {known}")
    return yaml.safe_load(f.read_text()) or {}


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


def check_host(profile: dict) -> list[Check]:
    ram_need, disk_need = offload_bytes(profile)
    ram = _free_ram()
    checks = [Check("host ram", "ok" if not ram < ram_need else "fail",
                    f"{_gb(ram)} available", f"{_gb(ram_need)} offloaded "
                    "model states (lab 4)", "a node with more RAM, or drop "
                    "the offload variants")]
    nvme = (profile.get("zero") or {}).get("nvme_path") or str(ROOT / "_build")
    where = Path(nvme)
    while not where.exists():
        where = where.parent
    free = shutil.disk_usage(where).free
    checks.append(Check("disk", "ok" if free >= disk_need else "fail",
                        f"{_gb(free)} free at {where}",
                        f"{_gb(disk_need)} (NVMe offload) at {nvme}",
                        "point zero.nvme_path at a larger local NVMe drive"))
    return checks


def run(name: str, with_probe: bool = True) -> list[Check]:
    profile = load_profile(name)
    checks = [*check_devices(name, profile), *check_torch(name),
              *check_deepspeed(profile), *check_topology(name)]
    checks += __import__("labkit.disk").disk.folder_checks(name)
    if with_probe and not any(c.status == "fail" for c in checks):
        checks += probe(name, profile)
    elif with_probe:
        checks.append(Check("busbw probe", "fail", "not run",
                            "the lines above ok"))
    # after the probe: lab 9's compiler does not gate NCCL's bandwidth
    return checks + check_nvcc(name, profile) + check_host(profile)


def summary(checks: list[Check]) -> dict:
    """What a results record carries: status and the lines not ok."""
    worst = max((c.status for c in checks), key=STATUS.get, default="ok")
    first = next((c for c in checks if c.status == worst != "ok"), None)
    return {"status": worst, "exit": STATUS[worst],
            "reason": first and (first.fix or f"{first.name}: {first.found}"),
            "problems": [f"{c.name}: {c.found} (need {c.need})"
                         for c in checks if c.status != "ok"]}


def table(checks: list[Check]) -> str:
    rows = [(c.status.upper(), c.name, c.found, c.need,
             c.fix if c.status != "ok" else "") for c in checks]
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


def main(args) -> int:
    checks = run(args.profile, with_probe=not args.no_probe)
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
