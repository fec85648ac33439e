"""Is this machine what a lab profile needs? One table, before the meter runs.

    python -m labkit preflight                   # the cpu profile
    python -m labkit preflight --profile gpu8    # on a rented 8-GPU node
    python -m labkit preflight --profile gpu8 --json

Each line is ``ok``, ``warn`` or ``fail`` with what was found, what the
profile needs and, when it is not ok, the fix. Checks: processes the
profile starts against CUDA GPUs (GPU profiles) or cores (cpu); GPU memory
against the largest model's DDP states (``labkit.predict.memory``); the
torch build and its CUDA / NCCL versions (gloo on CPU); DeepSpeed's ops
lab 4 needs (``ds_report``'s "compatible" column, asked from the same op
builders); the GPU interconnect (``nvidia-smi topo -m``); a short
all-reduce bus-bandwidth probe at two sizes (``labkit.runs.collectives``,
nccl against the profile's link preset, or gloo on CPU); free disk where
NVMe offload writes and host RAM for the offload cells.

Exit status: 0 all ok, 1 warnings, 2 a lab would fail. A profile is a GPU
profile unless it is named ``cpu`` (the labs' rule: ``on_gpu = profile !=
"cpu"``).
"""
from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from labkit.predict.labtime import deepspeed_ops

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "labs" / "profiles"
STATUS = {"ok": 0, "warn": 1, "fail": 2}
RANK_KEYS = ("world_size", "world_sizes", "tp_sizes", "stages",
             "sweep_stages")   # and any "<what>_world_size"
PROBE_SIZES = {"gpu": (64 << 20, 1 << 30), "cpu": (64 << 10, 1 << 20)}
PROBE_OK = 0.6   # busbw below 60 % of the link preset is a warning


@dataclass
class Check:
    name: str
    status: str      # ok / warn / fail
    found: str
    need: str = ""
    fix: str = ""


def load_profile(name: str) -> dict:
    """``labs/profiles/<name>.yaml``; a clear error for an unknown name."""
    import yaml
    f = PROFILES / f"{name}.yaml"
    if not f.is_file():
        known = sorted(p.stem for p in PROFILES.glob("*.yaml"))
        raise ValueError(f"unknown profile {name!r}; known: {known}")
    return yaml.safe_load(f.read_text()) or {}


def lab_ranks(params: dict) -> int:
    """The most processes (one GPU each) one launch of a lab starts."""
    most = 1
    for key, v in (params or {}).items():
        if key in RANK_KEYS or key.endswith("_world_size"):
            for n in (v if isinstance(v, list) else [v]):
                if isinstance(n, int) and not isinstance(n, bool):
                    most = max(most, n)
    return most


def ranks_needed(profile: dict) -> int:
    """The most processes one launch of the profile starts."""
    return max((lab_ranks(p) for p in profile.values()), default=1)


def largest_model(profile: dict) -> tuple[str, int, bool]:
    """(lab, parameters, bf16) of the largest ``model`` in the profile."""
    from labkit.predict.memory import gpt_params
    best = ("", 0, False)
    for lab, params in profile.items():
        m = (params or {}).get("model")
        if isinstance(m, dict):
            psi = gpt_params(**m)
            if psi > best[1]:
                best = (lab, psi, bool(params.get("bf16")))
    return best


def _gb(x: float) -> str:
    return f"{x / 1e9:.1f} GB"


def check_devices(name: str, profile: dict) -> list[Check]:
    from labkit.launch import cuda_device_count
    ranks = ranks_needed(profile)
    if name == "cpu":
        cores = os.cpu_count() or 1
        return [Check("cpu cores", "ok" if cores >= 2 else "warn",
                      f"{cores} cores", ">= 2 (budgets are measured on 2)",
                      "" if cores >= 2 else "expect slower labs")]
    gpus = cuda_device_count()
    if gpus == 0:
        return [no_gpus(name, ranks)]
    short = [] if gpus >= ranks else [Check(
        "gpus", "warn", f"{gpus} CUDA GPUs", f"{ranks} for every lab",
        f"labs that need more than {gpus} GPUs are skipped (run_labs "
        "says which); use a node with more GPUs to run them")]
    import torch
    props = torch.cuda.get_device_properties(0)
    lab, psi, bf16 = largest_model(profile)
    from labkit.predict.memory import ledger
    need = ledger(psi, 1, "ddp", "mixed" if bf16 else "fp32").gpu_total
    return [*(short or [Check("gpus", "ok", f"{gpus} x {props.name}",
                              f"{ranks}")]),
            Check("gpu memory", "ok" if need < 0.9 * props.total_memory
                  else "fail", _gb(props.total_memory),
                  f"{_gb(need)} DDP states of lab {lab} (+ activations)",
                  "a GPU with more memory")]


def no_gpus(name: str, ranks: int, smi_text: str | None = None) -> Check:
    """torch sees no GPU: say why when the driver is the reason (a CUDA
    build newer than the driver, a CPU build on a GPU node), not just "0"."""
    import torch
    from labkit import node
    text = node.nvidia_smi() if smi_text is None else smi_text
    found = node.parse_nvidia_smi(text) if text else None
    why = node.mismatch(torch.__version__, torch.version.cuda, found)
    if why is None and found and found.gpus and not torch.version.cuda:
        why = (f"torch {torch.__version__} is a CPU build on a node with "
               f"{len(found.gpus)} x {found.gpus[0]} (driver "
               f"{found.driver}, CUDA {found.cuda}): run `make setup` "
               "again (it picks the CUDA build for the driver)")
    if why:
        return Check("gpus", "fail", f"0 CUDA GPUs visible to torch; "
                     f"nvidia-smi: {len(found.gpus)} GPU(s), driver "
                     f"{found.driver}", f"{ranks} CUDA GPUs", why)
    return Check("gpus", "fail", "0 CUDA GPUs", f"{ranks} CUDA GPUs",
                 f"the {name} profile needs {ranks} CUDA GPUs: use a "
                 "node that has them, or --profile cpu")


def check_torch(name: str) -> list[Check]:
    import torch
    import torch.distributed as tdist
    if name == "cpu":
        ok = tdist.is_available() and tdist.is_gloo_available()
        return [Check("torch", "ok" if ok else "fail",
                      f"torch {torch.__version__}, gloo "
                      f"{'available' if ok else 'missing'}", "gloo",
                      "" if ok else "reinstall torch from requirements.txt")]
    if not torch.version.cuda:
        return [Check("torch", "fail", f"torch {torch.__version__} (CPU build)",
                      "a CUDA build", "pip install torch from the CUDA index "
                      "(https://pytorch.org/get-started/locally/)")]
    nccl = (".".join(map(str, torch.cuda.nccl.version()))
            if tdist.is_nccl_available() else "missing")
    return [Check("torch", "ok" if nccl != "missing" else "fail",
                  f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
                  f"NCCL {nccl}", "CUDA + NCCL")]


def check_deepspeed(profile: dict) -> list[Check]:
    import contextlib
    import sys
    try:  # DeepSpeed logs to stdout on import: keep --json's stdout clean
        with contextlib.redirect_stdout(sys.stderr):
            import deepspeed
            from deepspeed.ops.op_builder.all_ops import ALL_OPS
    except Exception as e:  # noqa: BLE001 - any import failure is the fact
        return [Check("deepspeed", "fail", f"import failed: {e}",
                      "deepspeed", "pip install -r requirements.txt")]
    ops, optional = deepspeed_ops(profile), deepspeed_ops(profile, True)
    if not ops and not optional:
        return [Check("deepspeed ops", "ok", f"deepspeed {deepspeed.__version__}",
                      "no op compiled by this profile")]
    out = []
    for need, status, what in ((ops, "fail", "lab 4"),
                               (optional, "warn", "lab 4's optional NVMe "
                                "cell (it reports the failure and goes on)")):
        if not need:
            continue
        bad = [op for op in need if not ALL_OPS[op].is_compatible(verbose=False)]
        out.append(Check(
            "deepspeed ops", status if bad else "ok",
            f"deepspeed {deepspeed.__version__}: " + ", ".join(
                f"{op} {'NOT compatible' if op in bad else 'compatible'}"
                for op in need), f"{', '.join(need)} for {what}",
            "see `ds_report`; async_io needs libaio-dev" if bad else ""))
    return out


def interconnect(topo: str) -> str:
    """``NVLink`` if ``nvidia-smi topo -m`` links any two GPUs by NV<n>,
    else ``PCIe`` (PIX / PXB / PHB / NODE / SYS)."""
    return "NVLink" if re.search(r"\bNV\d+\b", topo) else "PCIe"


def check_topology(name: str) -> list[Check]:
    if name == "cpu":
        return [Check("interconnect", "ok", "no GPUs", "none (gloo over TCP)")]
    smi = shutil.which("nvidia-smi")
    if not smi:
        return [Check("interconnect", "fail", "nvidia-smi not found",
                      "nvidia-smi topo -m", "install the NVIDIA driver")]
    topo = subprocess.run([smi, "topo", "-m"], capture_output=True,
                          text=True, timeout=30).stdout
    kind = interconnect(topo)
    return [Check("interconnect", "ok" if kind == "NVLink" else "warn", kind,
                  "NVLink/NVSwitch", "" if kind == "NVLink" else
                  "PCIe: set link: pcie4/pcie5 in the profile")]


def probe(name: str, profile: dict, timeout: float = 120) -> list[Check]:
    """All-reduce bus bandwidth at two sizes, ~10 s of collectives."""
    from labkit.launch import LaunchError, cuda_device_count, launch
    from labkit.predict.collectives import busbw, LINKS
    gpu = name != "cpu"
    ranks = min(ranks_needed(profile), cuda_device_count()) if gpu else 2
    if gpu and ranks < 2:   # one GPU: no collective to time
        return [Check("busbw probe", "ok", "not run (one GPU)",
                      "2+ CUDA GPUs to measure a link")]
    small, large = PROBE_SIZES["gpu" if gpu else "cpu"]
    try:
        out = launch("labkit.runs.collectives", ranks, {
            "ops": "all_reduce", "min_bytes": small, "max_bytes": large,
            "factor": large // small, "warmup": 2, "iters": 10},
            timeout=timeout, require_gpu=gpu)
    except LaunchError as e:
        return [Check("busbw probe", "fail", str(e).splitlines()[0], "",
                      "run the collectives lab to see the logs")]
    rows = {}
    for rec in out:  # the slowest rank's time, as the collectives lab
        for r in rec["rows"]:
            rows[r["bytes"]] = max(rows.get(r["bytes"], 0), r["seconds"])
    bw = {b: busbw("all_reduce", b, t, ranks) for b, t in sorted(rows.items())}
    found = ", ".join(f"{b >> 20 or b >> 10}{'MiB' if b >> 20 else 'KiB'}: "
                      f"{v / 1e9:.2f} GB/s" for b, v in bw.items())
    link = next((p.get("link") for p in profile.values()
                 if (p or {}).get("link")), None)
    if not gpu or link not in LINKS:
        return [Check("busbw probe", "ok", f"{out[0]['backend']} {ranks} "
                      f"ranks, {found}", "it runs (no link preset on CPU)")]
    share = max(bw.values()) / LINKS[link].bandwidth
    return [Check("busbw probe", "ok" if share >= PROBE_OK else "warn",
                  f"{found} = {share:.0%} of {link}",
                  f">= {PROBE_OK:.0%} of {link}",
                  "" if share >= PROBE_OK else "check NCCL_* settings, the "
                  "topology, or set the profile's link to what you have")]


def offload_bytes(profile: dict) -> tuple[float, float]:
    """(host RAM, NVMe bytes) the offload cells of lab 4 need on this node:
    every rank's offloaded model states (``labkit.predict.memory.ledger``)."""
    from labkit.predict.memory import gpt_params, ledger
    zero = profile.get("zero") or {}
    variants = zero.get("variants", [])
    if not any("offload" in v for v in variants) or "model" not in zero:
        return 0.0, 0.0
    n = zero.get("world_size", 1)
    led = ledger(gpt_params(**zero["model"]), n, "zero3",
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
    return checks + check_host(profile)


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
