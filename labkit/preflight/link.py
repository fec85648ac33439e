"""Preflight's link lines: the GPU interconnect and a bus-bandwidth probe.

    from labkit.preflight.link import check_topology, probe
    check_topology("gpu8"); probe("gpu8", load_profile("gpu8"))

``nvidia-smi topo -m`` names the link; a short all-reduce at two sizes
(``labkit.runs.collectives``, nccl against the profile's link preset, or
gloo on CPU) measures it.
"""
from __future__ import annotations

import re
import shutil
import subprocess

from labkit.preflight.check import Check, ranks_needed

PROBE_SIZES = {"gpu": (64 << 20, 1 << 30), "cpu": (64 << 10, 1 << 20)}
PROBE_OK = 0.6   # busbw below 60 % of the link preset is a warning


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
    from labkit.launch import launch
    from labkit.launch.report import LaunchError
    from labkit.launch.request import cuda_device_count
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
