"""The wheels a bare GPU machine lacks (``.whl/``), installed once.

    make gpu-wheels                  # fills .whl/ (scripts/gpu_wheels.py)
    python scripts/gpu_check.py      # installs them (this module)

``pip install --no-index --no-deps --target`` into one folder for every
run of the check on this machine (``_build/gpu-check/site``), with a
stamp naming the wheels it holds: a second run (a rerun after a check
killed at its limit) installs nothing. torch never: the machine's build
is the one checked.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ROOT / ".whl"
SITE = ROOT / "_build" / "gpu-check" / "site"


def wheel_list(wheels: Path) -> list[Path]:
    return sorted(p for p in wheels.glob("*.whl")
                  if not p.name.lower().startswith("torch-"))


def install_wheels(out: Path, wheels: Path = WHEELS, site: Path = SITE
                   ) -> dict:
    """The environment additions for the steps ({} without wheels);
    ``out`` gets ``wheels.json`` (installed now, or already there)."""
    found = wheel_list(wheels)
    if not found:
        return {}
    want = [f"{p.name} {p.stat().st_size}" for p in found]
    stamp = site / ".installed.json"
    again = stamp.is_file() and json.loads(stamp.read_text()) == want
    if not again:
        shutil.rmtree(site, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                        "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--target", str(site),
                        *map(str, found)], check=True)
        stamp.write_text(json.dumps(want))
    out.mkdir(parents=True, exist_ok=True)
    (out / "wheels.json").write_text(json.dumps(
        {"site": str(site), "installed_now": not again, "wheels": want},
        indent=1))
    return {"LABKIT_GPU_CHECK_SITE": str(site)}


def step_env(extra: dict) -> dict:
    env = {**os.environ, **extra}
    paths = [str(ROOT)]
    if extra.get("LABKIT_GPU_CHECK_SITE"):
        paths.append(extra["LABKIT_GPU_CHECK_SITE"])
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
