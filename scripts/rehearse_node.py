"""Rehearse the GPU node's recipe in a clean, minimal root file system.

    sudo .venv/bin/python scripts/rehearse_node.py     # minutes, as root
    sudo .venv/bin/python scripts/rehearse_node.py --keep   # keep the tree

A fresh image has none of the course's toolchain. This builds one --
Debian bookworm, ``debootstrap --variant=minbase`` from the mirror this
machine's apt uses; its tarball is kept in ``~/.cache/labkit/`` and reused
-- enters it with bubblewrap (``bwrap --bind ROOT / --dev /dev --proc
/proc``, the checkout's tracked and new files copied to ``/work/course``,
this machine's network), checks that nvcc, npm and ninja are absent, and
runs, each as one named step with its exit status and seconds:

1. the recipe, ``sh scripts/node_setup.sh`` (system packages, ``.venv``,
   ``.venv-colossalai``; its own steps are named in its output);
2. ``python -m labkit preflight --profile gpu8 --rehearse``;
3. one rehearsed lab, ``scripts/run_labs.py --profile gpu8 --rehearse
   --only memory``.

pip inside reads this machine's pip cache and the local wheel folders
its pip configuration names (bound read-only), so torch is not
downloaded again; Colossal-AI's wheel folder is bound as ``make
colossalai`` expects it. A step that fails is named with the last lines
of its output; the steps after it still run. The result is written to
``docs/node-rehearsal.md`` (generated, never edited by hand). Exit status
0 when every step passed. Not part of ``make test`` (minutes of apt and
pip); a benchmark-style check, like ``make benchmark``.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path.home() / ".cache" / "labkit"
TARBALL = CACHE / "rootfs-bookworm-minbase.tar"
WORK = CACHE / "node-rehearsal"
DOC = ROOT / "docs" / "node-rehearsal.md"
INSIDE = "/work/course"
ABSENT = ("nvcc", "npm", "ninja")   # the fresh image's toolchain: none
# (name, command, seconds allowed, exit statuses that pass): preflight's
# 1 is a warning or a lab it skips (lab 9 without nvcc), never a refusal
STEPS = [
    ("recipe", "sh scripts/node_setup.sh", 3600, (0,)),
    ("preflight", ".venv/bin/python -m labkit preflight --profile gpu8 "
     "--rehearse", 900, (0, 1)),
    ("rehearsed lab", ".venv/bin/python scripts/run_labs.py --profile gpu8 "
     "--rehearse --only memory", 1800, (0,)),
]


def mirror() -> str:
    """The Debian mirror of this machine's apt (deb822 or one-line)."""
    files = [Path("/etc/apt/sources.list"),
             *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for f in files:
        text = f.read_text() if f.is_file() else ""
        for url in re.findall(r"^(?:URIs:|deb)\s+(\S+)", text, re.M):
            if url.rstrip("/").endswith("/debian"):
                return url
    return "http://deb.debian.org/debian"


def rootfs(tree: Path) -> str:
    """A fresh tree at ``tree`` from the cached tarball (built once)."""
    if not TARBALL.is_file():
        build = CACHE / "rootfs-build"
        shutil.rmtree(build, ignore_errors=True)
        subprocess.run(["debootstrap", "--variant=minbase", "bookworm",
                        str(build), mirror()], check=True)
        part = TARBALL.with_suffix(".part")
        subprocess.run(["tar", "-C", str(build), "-cf", str(part), "."],
                       check=True)
        part.rename(TARBALL)
        shutil.rmtree(build, ignore_errors=True)
        how = f"debootstrap --variant=minbase bookworm ({mirror()})"
    else:
        how = f"cached {TARBALL.name}"
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    subprocess.run(["tar", "-C", str(tree), "-xf", str(TARBALL)], check=True)
    shutil.copy("/etc/resolv.conf", tree / "etc" / "resolv.conf")
    return how


def copy_checkout(dest: Path) -> int:
    """The checkout's tracked and new (not ignored) files: no venv, no
    build output, nothing of this machine's."""
    names = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
        capture_output=True, check=True).stdout.decode().split("\0")
    n = 0
    for name in filter(None, names):
        src = ROOT / name
        if src.is_file() and not src.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
            n += 1
    return n


def pip_binds() -> tuple[list[str], dict]:
    """bwrap arguments and environment that give pip this machine's
    cache, configuration and local wheel folders (read-only)."""
    args, env = [], {k: v for k, v in os.environ.items()
                     if k.startswith("PIP_")}
    cache = Path.home() / ".cache" / "pip"
    if cache.is_dir():
        args += ["--bind", str(cache), "/root/.cache/pip"]
    wheels = CACHE / "wheels-colossalai"
    if wheels.is_dir():
        args += ["--bind", str(wheels), "/root/.cache/labkit/"
                 "wheels-colossalai"]
    cert = env.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
    if cert and Path(cert).is_file():   # a proxy's CA the image lacks
        args += ["--ro-bind", cert, "/etc/host-ca-certificates.crt"]
        env["PIP_CERT"] = "/etc/host-ca-certificates.crt"
    text = " ".join(env.values())
    home = Path.home()
    for conf, inside in ((Path("/etc/pip.conf"), "/etc/pip.conf"),
                         (Path("/etc/xdg/pip"), "/etc/xdg/pip"),
                         (home / ".config/pip", "/root/.config/pip"),
                         (home / ".pip", "/root/.pip")):
        if conf.exists():    # pip's site, XDG and user configurations
            files = [conf] if conf.is_file() else sorted(conf.iterdir())
            text += " ".join(" " + f.read_text() for f in files)
            args += ["--ro-bind", str(conf), inside]
    for path in sorted(set(re.findall(r"(?:file://)?(/opt/[\w./-]+)",
                                      text))):
        p = Path(path)
        if p.name == "simple":     # a local index: its folder of files
            p = p.parent
        if p.is_dir():
            args += ["--ro-bind", str(p), str(p)]
    return args, env


def bwrap(tree: Path, course: Path, command: str, timeout: float,
          extra: list[str], env: dict) -> tuple[int, str, float]:
    """``command`` inside the tree; (exit status, output, seconds)."""
    cmd = ["bwrap", "--bind", str(tree), "/", "--dev", "/dev", "--proc",
           "/proc", "--bind", str(course), INSIDE, *extra,
           "--chdir", INSIDE, "--die-with-parent", "--unshare-pid",
           "/bin/sh", "-c", command]
    clean = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
             "/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8",
             "DEBIAN_FRONTEND": "noninteractive", **env}
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, env=clean, capture_output=True, text=True,
                           timeout=timeout)
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc = 124
        out = (e.stdout or b"").decode(errors="replace") + \
            f"\ntimed out after {timeout:.0f} s"
    return rc, out, time.monotonic() - t0


def _tail(text: str, n: int = 8) -> list[str]:
    """The last lines of a step's output, without pip's notes on the index
    folders of the machine that ran it (they name its paths)."""
    return [ln[:200] for ln in text.strip().splitlines()[-n:]
            if "[WARNING]" not in ln and "Location 'file:" not in ln]


def report(rows: list, facts: dict) -> str:
    lines = ["# The node recipe, rehearsed",
             "", "Generated by `scripts/rehearse_node.py` (do not edit): the "
             "recipe of `book/running.md` run in a clean Debian root file "
             "system under bubblewrap, on a CPU machine (no GPU: preflight "
             "and the lab are rehearsals on the described 8 x H100 node).",
             "", *(f"- {k}: {v}" for k, v in facts.items()), "",
             "| step | command | exit | seconds |", "|---|---|---|---|"]
    lines += [f"| {name} | `{cmd}` | {rc} | {s:.0f} |"
              for name, cmd, rc, s, _, _ in rows]
    for name, cmd, rc, s, out, ok in rows:
        lines += ["", f"## {name}: {'passed' if ok else 'FAILED'}",
                  "", "```text", *out, "```"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keep", action="store_true",
                    help="keep the root file system after the run")
    ap.add_argument("--doc", type=Path, default=DOC)
    a = ap.parse_args(argv)
    missing = [t for t in ("bwrap", "tar", "git") if not shutil.which(t)]
    if os.geteuid() != 0 or missing or (not TARBALL.is_file()
                                        and not shutil.which("debootstrap")):
        sys.exit("rehearse_node: needs root, bwrap, tar, git and (for the "
                 "first run) debootstrap: apt-get install bubblewrap "
                 "debootstrap" + (f"; missing: {missing}" if missing else ""))
    tree = WORK / "root"
    how = rootfs(tree)
    course = tree / INSIDE.lstrip("/")
    files = copy_checkout(course)
    extra, env = pip_binds()
    rc, out, _ = bwrap(tree, course, "for t in " + " ".join(ABSENT) +
                       "; do command -v $t; done; true", 60, extra, env)
    present = out.split()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                            cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    facts = {"root file system": f"Debian bookworm minbase ({how})",
             "checkout": f"{files} files of {commit} (and its working "
             "tree's changes) at " + INSIDE,
             "absent before the recipe": ", ".join(
                 t for t in ABSENT if not any(p.endswith("/" + t)
                                              for p in present)) or "none",
             "host": f"{platform.machine()}, {os.cpu_count()} cores"}
    rows = []
    for name, cmd, limit, passing in STEPS:
        print(f"rehearse_node: {name}: {cmd}", flush=True)
        copy_checkout(course)     # the checkout as the step starts
        rc, out, s = bwrap(tree, course, cmd, limit, extra, env)
        keep = [ln for ln in out.splitlines() if ln.startswith(
            "node-setup:")] if name == "recipe" else []
        ok = rc in passing
        # preflight: its whole table; else the last lines
        n = 40 if name == "preflight" else 8 if ok else 14
        rows.append((name, cmd, rc, s, keep + _tail(out, n), ok))
        print(f"rehearse_node: {name}: exit {rc} in {s:.0f} s", flush=True)
        if not ok:
            print("\n".join(_tail(out, 20)), flush=True)
    rc, out, _ = bwrap(tree, course, "for t in cc ninja git nvcc npm; do "
                       "command -v $t || echo no $t; done; "
                       ".venv/bin/python -c 'import torch; print("
                       "\"torch\", torch.__version__)'", 120, extra, env)
    facts["after the recipe"] = "; ".join(out.split("\n")).strip("; ")
    a.doc.parent.mkdir(parents=True, exist_ok=True)
    a.doc.write_text(report(rows, facts))
    print(f"rehearse_node: wrote {a.doc}")
    if not a.keep:
        shutil.rmtree(tree, ignore_errors=True)
    return 0 if all(r[-1] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
