"""``pip install`` for the Makefile's environments, made fast by uv.

    .venv/bin/python scripts/pip_install.py -q -r requirements.txt
    .venv/bin/python scripts/pip_install.py --pip -q -r requirements.txt

Installs into the environment of the Python that runs it, with the same
arguments pip takes. uv (pinned below) installs the same pins as pip, read
from the same places: pip's own configuration (``pip config list``: its
index, extra indexes, find-links, constraints, certificate and timeout) is
passed to uv, whose index strategy is set to pip's (the best version across
every index, not the first index that has the name). What changes is the
time: uv keeps unpacked wheels in its cache and links them into the
environment, where pip unzips every wheel again (torch alone is about
1 GB unpacked) each time a fresh clone makes its environments.

Whenever uv cannot be had or fails, pip installs instead, after one line
saying why; ``--pip`` (or ``LABKIT_PIP=pip``) asks for pip outright.
"""
from __future__ import annotations

import os
import subprocess
import sys

UV = "uv==0.13.9"
# pip's configuration keys -> uv's flags (pip config list: "scope.key='v'")
MULTI = {"find-links": "--find-links", "extra-index-url":
         "--extra-index-url", "constraint": "--constraint"}
SINGLE = {"index-url": "--index-url"}


def pip_config(python: str = sys.executable) -> dict[str, list[str]]:
    """Every value pip's configuration sets, by key, as pip reads it (its
    files and ``PIP_*`` variables: ``pip config list``)."""
    r = subprocess.run([python, "-m", "pip", "config", "list"],
                       capture_output=True, text=True, timeout=60)
    out: dict[str, list[str]] = {}
    for line in r.stdout.splitlines():
        name, _, value = line.partition("=")
        key = name.rsplit(".", 1)[-1]
        value = value.strip().strip("'\"")
        if value and value not in out.get(key, []):
            out.setdefault(key, []).append(value)
    return out


def uv_args(config: dict[str, list[str]]) -> tuple[list[str], dict]:
    """uv's flags and environment for pip's ``config``."""
    args, env = ["--index-strategy", "unsafe-best-match"], {}
    for key, flag in {**MULTI, **SINGLE}.items():
        values = [v for raw in config.get(key, []) for v in raw.split()]
        if key in SINGLE:
            values = values[-1:]
        for v in values:
            if flag in ("--find-links", "--constraint") and \
                    "://" not in v and not os.path.exists(v):
                continue    # pip skips a missing one with a warning
            args += [flag, v]
    if config.get("no-index", [""])[-1].lower() in ("1", "true", "yes"):
        args.append("--no-index")
    if config.get("cert"):
        env["SSL_CERT_FILE"] = config["cert"][-1]
    if config.get("default-timeout"):
        env["UV_HTTP_TIMEOUT"] = config["default-timeout"][-1].split(".")[0]
    return args, env


def uv_binary(python: str = sys.executable) -> str | None:
    """uv's binary in this environment, installed by pip if missing."""
    def find():
        r = subprocess.run(
            [python, "-c", "import uv; print(uv.find_uv_bin())"],
            capture_output=True, text=True, timeout=60)
        return r.stdout.strip() if r.returncode == 0 else None
    found = find()
    if found is None:
        subprocess.run([python, "-m", "pip", "install", "-q", UV],
                       capture_output=True, timeout=600)
        found = find()
    return found


def pip(argv: list[str]) -> int:
    """pip itself, brought up to date first (a venv's own pip is old)."""
    subprocess.call([sys.executable, "-m", "pip", "install", "-q",
                     "--upgrade", "pip"])
    return subprocess.call([sys.executable, "-m", "pip", "install", *argv])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--pip" in argv or os.environ.get("LABKIT_PIP") == "pip":
        return pip([a for a in argv if a != "--pip"])
    uv = uv_binary()
    if uv is None:
        print(f"pip_install: {UV} could not be installed: pip installs",
              file=sys.stderr, flush=True)
        return pip(argv)
    flags, env = uv_args(pip_config())
    # --compile-bytecode: as pip does; without it every interpreter
    # compiles torch's modules again where PYTHONDONTWRITEBYTECODE is set
    rc = subprocess.call([uv, "pip", "install", "--python", sys.executable,
                          "--compile-bytecode", *flags, *argv],
                         env={**os.environ, **env})
    if rc == 0:
        return 0
    print(f"pip_install: uv exited {rc}: pip installs instead",
          file=sys.stderr, flush=True)
    return pip(argv)


if __name__ == "__main__":
    sys.exit(main())
