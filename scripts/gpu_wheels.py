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
(``pip wheel --no-deps``, no ops compiled) -- by this machine's Python,
which is right when the wheel comes out pure (``py3-none-any``, as
DeepSpeed's does); a compiled one for this Python is removed and the
package built again by a CPython 3.12 if there is one, else refused in one
line (:func:`build_from_source`, :func:`fits_312`). Wheels of versions no longer needed (an
earlier run's, a package dropped since) are removed first
(:func:`prune`): the folder holds exactly one wheel per package.
``scripts/gpu_check.py`` installs the folder with ``pip install
--no-index --no-deps --target``.
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


def wheel_name(path: Path) -> tuple[str, str, str, str, str]:
    """(name, version, python tag, abi tag, platform tag) of a wheel file
    (PEP 427: ``name-version[-build]-python-abi-platform.whl``)."""
    parts = path.name[:-4].split("-")
    return (_norm(parts[0]), parts[1], parts[-3], parts[-2], parts[-1])


def fits_312(path: Path) -> bool:
    """Does the wheel install on CPython 3.12 (x86-64 Linux)?"""
    _, _, py, abi, plat = wheel_name(path)
    pys, abis = set(py.split(".")), set(abi.split("."))
    if plat == "any":
        return bool(pys & {"py3", "cp312", "py312"})
    linux = "x86_64" in plat and ("linux" in plat)
    return linux and ("cp312" in pys or "abi3" in abis and any(
        p.startswith("cp3") and int(p[3:] or 0) <= 12 for p in pys))


def prune(pkgs: dict[str, str], out: Path = OUT) -> list[str]:
    """Remove the wheels of ``out`` that are not ``pkgs`` at their version
    (stale versions, dropped packages); the names removed."""
    gone = []
    for w in sorted(out.glob("*.whl")):
        name, version, *_ = wheel_name(w)
        if pkgs.get(name) != version:
            w.unlink()
            gone.append(w.name)
    return gone


def python_312(candidates=("python3.12",)) -> str | None:
    """A CPython 3.12 here (``GPU_WHEELS_PYTHON``, else ``python3.12`` on
    PATH) to build a compiled wheel for the GPU machine, or None."""
    import os
    import shutil
    for c in ([os.environ["GPU_WHEELS_PYTHON"]] if
              os.environ.get("GPU_WHEELS_PYTHON") else []) + list(candidates):
        exe = shutil.which(c) or (c if Path(c).is_file() else None)
        if not exe:
            continue
        r = subprocess.run([exe, "-c", "import sys; print(sys.version_info"
                            "[:2] == (3, 12) and sys.implementation.name"
                            " == 'cpython')"], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip() == "True":
            return exe
    return None


def _built(name: str, version: str, out: Path) -> list[Path]:
    return [w for w in out.glob("*.whl")
            if wheel_name(w)[:2] == (name, version)]


def build_from_source(name: str, version: str, out: Path = OUT) -> Path:
    """Build ``name==version`` into a wheel for the GPU machine's 3.12.

    First with this Python (``--no-build-isolation``: the build needs what
    ``.venv`` has, e.g. DeepSpeed's ``setup.py`` reads torch), which is
    right when the wheel comes out pure (``py3-none-any``, DeepSpeed's).
    A compiled wheel for this Python is removed, and the package is built
    again by a CPython 3.12 (:func:`python_312`, in pip's isolated build
    environment); with none here, one line says what to do. Whatever is
    left in ``out`` for the package is the one wheel that fits 3.12.
    """
    import os
    spec = f"{name}=={version}"
    env = {**os.environ, "DS_BUILD_OPS": "0"}
    for w in _built(name, version, out):
        w.unlink()                  # an earlier build's, whatever it was
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(out), spec],
                   check=True, env=env)
    bad = [w for w in _built(name, version, out) if not fits_312(w)]
    for w in bad:
        w.unlink()
    if bad:
        py = python_312()
        if py is None:
            raise SystemExit(
                f"gpu-wheels: {spec} is published only as source and built "
                f"here for this Python ({bad[0].name}), not for the GPU "
                "machine's 3.12, and no CPython 3.12 is here to build it "
                "(put python3.12 on PATH or set GPU_WHEELS_PYTHON)")
        print(f"{spec}: {bad[0].name} is for this Python; building again "
              f"with {py} (3.12)")
        subprocess.run([py, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                        str(out), spec], check=True, env=env)
        bad = [w for w in _built(name, version, out) if not fits_312(w)]
        for w in bad:
            w.unlink()
    good = [w for w in _built(name, version, out) if fits_312(w)]
    if not good:
        raise SystemExit(f"gpu-wheels: building {spec} gave no wheel for "
                         "CPython 3.12 on x86-64 Linux")
    return good[0]


def download(pkgs: dict[str, str], out: Path = OUT) -> None:
    out.mkdir(exist_ok=True)
    for w in prune(pkgs, out):
        print(f"removed {w} (not a version the check needs)")
    # a wheel built for another Python (an earlier source build) does not
    # count: the GPU machine runs 3.12
    have = {wheel_name(w)[:2] for w in out.glob("*.whl") if fits_312(w)}
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    for name, version in pkgs.items():
        if (name, version) in have:
            continue                    # downloaded before
        spec = f"{name}=={version}"
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q",
                            "--no-deps", "--only-binary=:all:",
                            "--python-version", "3.12",
                            "--implementation", "cp", *plat, "-d", str(out),
                            spec])
        if r.returncode:       # source only: build a wheel here
            build_from_source(name, version, out)
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
