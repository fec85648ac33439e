"""A GPU node's driver and the torch build that runs on it (no torch import).

    python scripts/torch_build.py            # what `make setup` installs
    python scripts/torch_build.py --explain  # the reasoning, one line each

``requirements.txt`` pins torch as a CPU install froze it. On a GPU node a
plain ``pip install torch==<pin>`` takes PyPI's default CUDA build, which
needs a driver new enough for that CUDA version; on an older driver torch
imports, sees no GPU, and every GPU lab fails with "0 GPUs". So
``make setup`` reads the driver from ``nvidia-smi`` and picks:

- no ``nvidia-smi`` (a CPU machine): nothing changes, requirements.txt's
  torch as it is;
- a GPU node: the newest build on the PyTorch index (:data:`BUILDS`) whose CUDA
  version the driver supports (a driver runs code built for its own CUDA
  version or older -- the "CUDA Version" ``nvidia-smi`` prints is the
  newest it supports): a 570 or 575 driver (CUDA 12.8, 12.9) gets cu126,
  a 580 driver (CUDA 13.0) cu130 (always from the index: what PyPI's
  plain ``torch`` is built for is not relied on);
- else the oldest build of the driver's CUDA major version: CUDA's minor
  version compatibility runs a 12.x build on any 12.x driver (>= 525.60.13)
  as long as nothing needs PTX compiled for a newer version (the wheels
  carry machine code for the GPUs they support);
- none: stop, in one line naming the driver and the builds.

``TORCH_INDEX`` (an index URL) or ``CUDA`` (e.g. ``12.6``, or ``cpu``)
overrides the choice. :func:`mismatch` is what ``labkit preflight`` says
when a CUDA build of torch meets an older driver.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

INDEX = "https://download.pytorch.org/whl"
# The stable CUDA builds of each torch minor version: PyTorch's own
# RELEASE.md, "Release Compatibility Matrix" (github.com/pytorch/pytorch,
# RELEASE.md; row 2.13: stable CUDA 12.6 and 13.0, experimental 13.2 --
# never picked by itself; 12.8's last release was 2.11). Index folders
# download.pytorch.org/whl/cuXYZ. The only copy of this table (setup's
# scripts/torch_build.py reads it here).
BUILDS = {"2.13": ("12.6", "13.0")}
# the oldest Linux driver of each CUDA version (CUDA Toolkit release notes,
# Table 3), to say what to upgrade to
MIN_DRIVER = {"11.8": "520.61.05", "12.0": "525.60.13", "12.4": "550.54.14",
              "12.6": "560.28.03", "12.8": "570.26", "13.0": "580.65.06"}

_HEADER = re.compile(r"Driver Version:\s*([\d.]+)\s+CUDA Version:\s*([\d.]+)")
_GPU = re.compile(r"^\|\s+(\d+)\s+(NVIDIA [^|]*?|Tesla [^|]*?)\s+(?:On|Off)\s+\|",
                  re.M)


@dataclass
class Node:
    driver: str | None          # e.g. "535.104.05"
    cuda: str | None            # the newest CUDA the driver supports
    gpus: list[str]
    error: str | None = None    # nvidia-smi ran but failed


def nvidia_smi(timeout: float = 20) -> str | None:
    """``nvidia-smi``'s output, or None where there is no such program."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        p = subprocess.run([exe], capture_output=True, text=True,
                           timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"nvidia-smi failed: {e}"
    return p.stdout + p.stderr


def parse_nvidia_smi(text: str) -> Node:
    """Driver, its CUDA version and the GPU names from ``nvidia-smi``."""
    m = _HEADER.search(text)
    gpus = [name.strip() for _, name in _GPU.findall(text)]
    if not m:
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()),
                     "no output")
        return Node(None, None, gpus, error=first)
    return Node(m.group(1), m.group(2), gpus)


def _v(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version))


def _minor(torch_version: str) -> str:
    return ".".join(torch_version.split("+")[0].split(".")[:2])


@dataclass
class Choice:
    pip_args: list[str]          # extra args for `pip install torch==pin`
    build: str                   # "pypi", "cu126", "cpu", "index"
    reason: str


class NoBuild(RuntimeError):
    """No torch build runs on this node's driver (the message is one line)."""


def choose(node: Node | None, torch_version: str, env: dict | None = None
           ) -> Choice:
    """The torch build for this node (see the module docstring)."""
    env = env or {}
    if env.get("TORCH_INDEX"):
        return Choice(["--index-url", env["TORCH_INDEX"]], "index",
                      f"TORCH_INDEX={env['TORCH_INDEX']}")
    minor = _minor(torch_version)
    builds = BUILDS.get(minor)
    if env.get("CUDA"):
        c = env["CUDA"].strip().lower().removeprefix("cu")
        if c == "cpu":
            return Choice(["--index-url", f"{INDEX}/cpu"], "cpu", "CUDA=cpu")
        tag = "cu" + c.replace(".", "")
        return Choice(["--index-url", f"{INDEX}/{tag}"], tag, f"CUDA={c}")
    if node is None:
        return Choice([], "pypi", "no nvidia-smi: requirements.txt as is")
    if node.driver is None:
        raise NoBuild(f"nvidia-smi found no working driver ({node.error}); "
                      "fix the driver, or set CUDA=cpu for a CPU install")
    if builds is None:
        raise NoBuild(f"no list of CUDA builds for torch {torch_version} "
                      f"(labkit.node.BUILDS); driver {node.driver} supports "
                      f"CUDA {node.cuda}: set CUDA=<version> or TORCH_INDEX")
    fits = [b for b in builds if _v(b) <= _v(node.cuda)]
    if fits:
        b = max(fits, key=_v)
        tag = "cu" + b.replace(".", "")
        return Choice(["--index-url", f"{INDEX}/{tag}"], tag,
                      f"driver {node.driver} supports CUDA {node.cuda}: "
                      f"the newest build it runs is {tag}")
    major = [b for b in builds if _v(b)[0] == _v(node.cuda)[0]]
    if major:
        b = min(major, key=_v)
        tag = "cu" + b.replace(".", "")
        return Choice(["--index-url", f"{INDEX}/{tag}"], tag,
                      f"driver {node.driver} supports CUDA {node.cuda}: "
                      f"{tag} by CUDA's minor version compatibility")
    oldest = min(builds, key=_v)
    raise NoBuild(
        f"driver {node.driver} supports CUDA {node.cuda}, but torch "
        f"{torch_version} is built for CUDA {', '.join(builds)}: upgrade the "
        f"driver to >= {MIN_DRIVER.get(oldest, 'one for CUDA ' + oldest)} "
        "or set TORCH_INDEX / CUDA")


def mismatch(torch_version: str, torch_cuda: str | None,
             node: Node | None) -> str | None:
    """Why a CUDA build of torch sees no GPU on this node, in one line,
    or None when the driver is not the reason."""
    if not torch_cuda or node is None:
        return None
    if node.driver is None:
        return (f"torch {torch_version} is built for CUDA {torch_cuda}, but "
                f"nvidia-smi found no working driver ({node.error})")
    if _v(torch_cuda)[0] > _v(node.cuda)[0]:   # minor versions are fine
        return (f"torch {torch_version} is built for CUDA {torch_cuda}; "
                f"driver {node.driver} supports CUDA {node.cuda} at most: "
                "reinstall torch with `make setup` (it picks a build the "
                "driver runs) or upgrade the driver")
    return None
