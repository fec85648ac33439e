"""Download here the wheels a GPU machine lacks, into .whl/ (never torch).

    make gpu-wheels                      # = python scripts/gpu_wheels.py
    python scripts/gpu_wheels.py --list  # names and versions, no download

A GPU machine lent for ``make gpu-check`` may have its own Python (3.12)
and torch build and none of our other packages, and no network.
:func:`needed` walks the requirements of what the check imports (DeepSpeed,
papermill and its Jupyter kernel, HolisticTraceAnalysis, ...) in this
project's ``.venv``, at the versions installed here, and leaves out torch,
its CUDA libraries and what such a machine already carries (:data:`ON_GPU`,
the package list of the workplace's CUDA image). Binary wheels come from
PyPI for CPython 3.12 on manylinux x86-64 (``pip download --only-binary``);
a package published only as source (DeepSpeed) is built into a wheel here
(``pip wheel --no-deps``, no ops compiled). ``scripts/gpu_check.py``
installs the folder with ``pip install --no-index --no-deps --target``.
Keep the folder git-ignored (``echo /.whl/ >> .git/info/exclude``): it is
carried to the machine, not committed.
"""
from __future__ import annotations

import argparse
import importlib.metadata as md
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / ".whl"
ROOTS = ("deepspeed", "papermill", "ipykernel", "nbformat",
         "HolisticTraceAnalysis", "hjson", "pydantic")
NEVER = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*|jupyterlab|notebook-shim)$")
# Already on the GPU machine's image (the device notes' package list)
ON_GPU = set("""absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal
annotated-doc anyio attrs certifi charset-normalizer click cloudpickle cmake
colorama contourpy cycler cython einops filelock fonttools frozenlist fsspec
h11 h5py hf-xet httpcore httpx huggingface-hub idna iniconfig jinja2 joblib
kiwisolver markdown markdown-it-py markupsafe matplotlib mdurl mpmath msgpack
multidict networkx ninja numpy packaging pandas pathspec pillow pip pluggy
prometheus-client propcache protobuf psutil py-cpuinfo pyarrow pybind11
pygments pyparsing pytest python-dateutil pyyaml regex requests rich
safetensors scipy setuptools six sympy tabulate tqdm typing-extensions
urllib3 wheel wrapt yarl zipp nvidia-ml-py""".split())
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def needed(roots=ROOTS) -> dict[str, str]:
    """{name: version installed here} of the roots and their requirements
    (no extras), less torch's stack and what the GPU image has."""
    seen: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = _norm(todo.pop())
        if name in seen or NEVER.match(name) or name in ON_GPU:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        seen[name] = dist.version
        for req in dist.requires or []:
            if "extra ==" in req:
                continue
            marker = req.split(";")[1] if ";" in req else ""
            if "python_version < \"3.1" in marker.replace("'", '"'):
                continue       # the GPU machine's Python is 3.12
            todo.append(re.split(r"[\s;<>=!~\[(]", req, maxsplit=1)[0])
    return dict(sorted(seen.items()))


def download(pkgs: dict[str, str], out: Path = OUT) -> None:
    out.mkdir(exist_ok=True)
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    for name, version in pkgs.items():
        spec = f"{name}=={version}"
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q",
                            "--no-deps", "--only-binary=:all:",
                            "--python-version", "3.12",
                            "--implementation", "cp", *plat, "-d", str(out),
                            spec])
        if r.returncode:       # source only: build a wheel here
            subprocess.run([sys.executable, "-m", "pip", "wheel", "-q",
                            "--no-deps", "--no-build-isolation", "-w",
                            str(out), spec], check=True,
                           env={**__import__("os").environ,
                                "DS_BUILD_OPS": "0"})
    total = sum(f.stat().st_size for f in out.glob("*.whl"))
    print(f"{len(pkgs)} packages, {total / 2**20:.1f} MiB of wheels in {out}"
          " (the device machine carries at most 64 MiB with the tree)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--list", action="store_true")
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args(argv)
    pkgs = needed()
    if a.list:
        for k, v in pkgs.items():
            print(f"{k}=={v}")
        return 0
    download(pkgs, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
