"""The torch build `make setup` installs on this machine (labkit.node).

    python scripts/torch_build.py            # pip arguments, or nothing
    python scripts/torch_build.py --explain  # and why, on stderr
    CUDA=12.6 python scripts/torch_build.py  # a chosen build
    TORCH_INDEX=https://download.pytorch.org/whl/cu130 python scripts/...

Prints ``torch==<pin> --index-url <the build's index>`` on a GPU node (the
build its driver runs: labkit.node.BUILDS, from PyTorch's RELEASE.md), and
nothing on a CPU machine (no ``nvidia-smi``): then requirements.txt
installs torch as it always did. Exit status 1, one line on stderr, when no
build runs on the driver.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from labkit import node  # noqa: E402


def pinned_torch(requirements: Path = ROOT / "requirements.txt") -> str:
    m = re.search(r"^torch==([^\s;]+)", requirements.read_text(), re.M)
    if not m:
        raise SystemExit(f"no torch== pin in {requirements}")
    return m.group(1)


def main(argv=None, smi_text: str | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--explain", action="store_true")
    a = p.parse_args(argv)
    pin = pinned_torch()
    text = node.nvidia_smi() if smi_text is None else smi_text
    found = node.parse_nvidia_smi(text) if text else None
    try:
        c = node.choose(found, pin, dict(os.environ))
    except node.NoBuild as e:
        print(f"make setup: {e}", file=sys.stderr)
        return 1
    if a.explain:
        print(f"torch {pin}: {c.build} ({c.reason})", file=sys.stderr)
    if c.pip_args:
        print(" ".join([f"torch=={pin}", *c.pip_args]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
