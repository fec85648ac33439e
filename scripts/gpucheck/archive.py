"""summary.json and ONE archive of the check, rewritten after every step.

    python scripts/gpu_check.py --dry --archive /tmp/x.tgz   # uses this

A check killed at its limit leaves the archive of its last finished step:
each is written to a temporary name and renamed over the old one. The
archive is flat (``<top>/<first folder>/<rest of the path, '/' as
'__'>``: at most two folders deep) and at most :data:`LIMIT` bytes: when
the files are over, traces go first (:func:`is_trace`), then the largest
other files; the summary and the logs stay, and what was left out is
listed in the summary (``archive_dropped``).
"""
from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

LIMIT = 16 * 2**20       # what the device's file return takes
SKIP_DIRS = {"site"}     # the installed wheels: not results


def is_trace(p: Path) -> bool:
    n = p.name
    return ("trace" in n or n.endswith((".json.gz", ".pickle", ".pt.trace"))
            or "snapshot" in n)


def flat_name(rel: Path) -> str:
    """``a/b/c/d.log`` -> ``a/b__c__d.log``; a top-level file as it is."""
    parts = rel.parts
    if len(parts) <= 2:
        return str(rel)
    return f"{parts[0]}/{'__'.join(parts[1:])}"


def choose(out: Path, limit: int) -> tuple[list[Path], list[str]]:
    """The files that go in (within ``limit``, uncompressed: gzip then
    never makes it larger than ~limit) and those left out."""
    files = [p for p in sorted(out.rglob("*")) if p.is_file()
             and not p.is_symlink()
             and p.relative_to(out).parts[0] not in SKIP_DIRS
             and p.name != "summary.json"]
    keep = {p: p.stat().st_size for p in files}
    dropped = []
    # traces first, then the largest; never a log (the findings)
    order = sorted(files, key=lambda p: (not is_trace(p), p.suffix == ".log",
                                         -keep[p]))
    budget = limit - 256 * 1024           # the summary and tar headers
    for p in order:
        if sum(keep.values()) <= budget:
            break
        if p.suffix == ".log" and not is_trace(p):
            continue
        del keep[p]
        dropped.append(str(p.relative_to(out)))
    return sorted(keep), dropped


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write(out: Path, summary: dict, archive: Path | None,
          limit: int = LIMIT) -> None:
    """summary.json in ``out`` and (when asked) the archive, both atomic."""
    if archive:
        files, dropped = choose(out, limit)
        summary["archive"] = {"path": str(archive), "limit_bytes": limit,
                              "dropped": dropped}
    text = json.dumps(summary, indent=1).encode()
    _replace(out / "summary.json", text)
    if not archive:
        return
    archive.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    top = out.name
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo(f"{top}/summary.json")
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text))
        for p in files:
            try:
                mtime, data = p.stat().st_mtime, p.read_bytes()  # whole
            except OSError:
                continue                  # a step's file gone meanwhile
            info = tarfile.TarInfo(f"{top}/{flat_name(p.relative_to(out))}")
            info.size, info.mtime = len(data), int(mtime)
            tar.addfile(info, io.BytesIO(data))
    _replace(archive, buf.getvalue())
