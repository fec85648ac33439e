"""Where checkpoints go and how they are written: whole, or not at all.

    root = checkpoint_root("resume")                   # _build/checkpoints/resume
    preflight(root, need_bytes)                        # before any process starts
    with atomic_step_dir(root, step, meta) as tmp:     # write into tmp ...
        dcp.save(state, checkpoint_id=tmp)             # ... renamed when done
    latest = latest_checkpoint(root)                   # skips half-written ones
    found, bad = newest_good_checkpoint(root)          # checks every byte

Rules (chapter 8): checkpoints live under ``_build/`` (or outside the
checkout, where ``run_labs.py --out`` puts a run), never in the source
tree; a checkpoint is written to ``step-NNNNNN.tmp`` and renamed to
``step-NNNNNN`` only when every rank has finished, so a crash mid-write
leaves a ``.tmp`` folder that :func:`latest_checkpoint` never returns; a
full disk, an unwritable folder or a checkpoint of another model shape is
one :class:`CheckpointError` that says what to do.

Checkpoints verify themselves: the metadata, written last, holds the size
and SHA-256 of every file (each rank's shard, DCP's ``.metadata``).
:func:`newest_good_checkpoint` walks back from the newest step; a folder
whose files do not match (truncated, zeroed, one bit flipped) is named in
one line and renamed ``step-NNNNNN.corrupt``: kept aside, never deleted,
and never loaded again. So is one that matches its sums but cannot be
loaded (``loadable``, the caller's probe: an unreadable DCP metadata file
written that way), and the one before is used, with a line.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "_build"
STEP_DIR = re.compile(r"^step-(\d{6})$")
META = "labkit-meta.json"
# room kept free beyond the checkpoint itself (metadata, the next .tmp)
FREE_MARGIN = 1.10


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written or does not fit this run."""


def checkpoint_root(name: str, base: str | Path | None = None) -> Path:
    """``_build/checkpoints/<name>`` (or under ``base``, itself in _build)."""
    root = Path(base) if base else BUILD / "checkpoints"
    return require_under_build(root / name)


def lab_root(results_dir: str | Path | None = None) -> Path:
    """Lab 8's own folder: ``<results_dir>/checkpoints`` (the runner's run
    folder, one per run), else a fresh ``_build/checkpoints/lab-XXXX``, so
    two runs of the lab never share (or delete) each other's checkpoints,
    scratch or ``run_dir`` (whose final sweep ends that run's ranks)."""
    import tempfile
    if results_dir:
        root = require_under_build(Path(results_dir) / "checkpoints")
        root.mkdir(parents=True, exist_ok=True)
        return root
    base = BUILD / "checkpoints"
    base.mkdir(parents=True, exist_ok=True)
    return require_under_build(tempfile.mkdtemp(prefix="lab-", dir=base))


def require_under_build(path: str | Path) -> Path:
    """``path``, resolved, if it is out of the source tree: under
    ``_build/`` or anywhere outside this checkout (``run_labs.py --out
    /scratch/labs``); a folder among the sources is a CheckpointError."""
    path = Path(path).resolve()
    inside = path == ROOT.resolve() or ROOT.resolve() in path.parents
    if inside and path != BUILD.resolve() \
            and BUILD.resolve() not in path.parents:
        raise CheckpointError(f"checkpoints go under {BUILD} or outside "
                              f"this checkout, not {path}: keep them out "
                              "of the source tree")
    return path


def step_dir(root: Path, step: int) -> Path:
    return Path(root) / f"step-{step:06d}"


def preflight(root: str | Path, need_bytes: float) -> Path:
    """Create ``root``, prove it writable and roomy enough, or raise."""
    root = require_under_build(root)
    probe = root / ".write-probe"
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"x")
        probe.unlink()
    except OSError as e:
        from labkit.disk import describe
        raise CheckpointError(f"cannot write checkpoints: "
                              f"{describe(e, root) or e.strerror or e}; "
                              "choose a writable folder under _build/"
                              ) from None
    free = shutil.disk_usage(root).free
    if need_bytes * FREE_MARGIN > free:
        raise CheckpointError(
            f"a checkpoint needs about {need_bytes:,.0f} bytes (+10 %), "
            f"{free:,} are free on the disk of {root}: free space or save "
            "fewer, smaller checkpoints")
    return root


def latest_checkpoint(root: str | Path) -> tuple[int, Path] | None:
    """(step, folder) of the newest complete checkpoint, or None.

    Only renamed folders count: ``step-NNNNNN.tmp`` is a write that never
    finished, and a resume must not load it.
    """
    root = Path(root)
    found = [(int(m.group(1)), p) for p in root.glob("step-*")
             if p.is_dir() and (m := STEP_DIR.match(p.name))
             and (p / META).exists()]
    return max(found) if found else None


def file_sums(folder: Path) -> dict:
    """``{relative path: {"bytes": n, "sha256": hex}}`` of every file but
    the metadata itself."""
    sums = {}
    for f in sorted(Path(folder).rglob("*")):
        if f.is_file() and f.name != META:
            with open(f, "rb") as fh:
                digest = hashlib.file_digest(fh, "sha256").hexdigest()
            sums[str(f.relative_to(folder))] = {"bytes": f.stat().st_size,
                                                "sha256": digest}
    return sums


def damage(folder: Path) -> str | None:
    """What is wrong with a checkpoint folder, or None if it verifies."""
    try:
        meta = json.loads((Path(folder) / META).read_text())
        recorded = meta.get("files")
    except (OSError, ValueError, AttributeError) as e:
        return f"unreadable {META}: {e}"
    if recorded is None:   # written before checksums: cannot be checked
        return None
    actual = file_sums(folder)
    for name, want in recorded.items():
        got = actual.get(name)
        if got is None:
            return f"{name} is missing"
        if got["bytes"] != want["bytes"]:
            return (f"{name} has {got['bytes']:,} bytes, "
                    f"{want['bytes']:,} were written")
        if got["sha256"] != want["sha256"]:
            return f"{name} does not match its SHA-256"
    return None


def set_aside(folder: Path) -> Path:
    """Rename a damaged checkpoint ``step-NNNNNN.corrupt``; never delete."""
    dest, n = folder.with_name(folder.name + ".corrupt"), 1
    while dest.exists():
        dest, n = folder.with_name(f"{folder.name}.corrupt-{n}"), n + 1
    os.replace(folder, dest)
    return dest


def newest_good_checkpoint(root: str | Path, say=None, loadable=None
                           ) -> tuple[tuple[int, Path] | None, list[str]]:
    """(step, folder) of the newest checkpoint that verifies, and the
    names of the damaged ones set aside on the way (one line each).
    ``loadable(folder)``: why a checkpoint whose files match their sums
    still cannot be loaded (None: it can).

    One process only (rank 0), before the others look: it renames.
    """
    root, bad = Path(root), []
    while (found := latest_checkpoint(root)) is not None:
        why = damage(found[1])
        if why is None and loadable is not None:
            why = loadable(found[1])
            why = why and f"its files match their sums, but {why}"
        if why is None:
            return found, bad
        dest = set_aside(found[1])
        bad.append(found[1].name)
        (say or _say)(f"checkpoint {found[1].name} in {root} is damaged "
                      f"({why}): kept aside as {dest.name}, trying the one "
                      "before")
    return None, bad


def _say(line: str) -> None:
    print(line, flush=True)


def check_meta(folder: Path, expected: dict) -> dict:
    """The checkpoint's recorded model shape must be this run's."""
    meta = json.loads((Path(folder) / META).read_text())
    saved = meta.get("model")
    if saved != expected:
        diff = {k: (saved.get(k) if saved else None, v)
                for k, v in expected.items()
                if not saved or saved.get(k) != v}
        raise CheckpointError(
            f"{folder} holds a checkpoint of another model shape "
            f"(saved vs this run: {diff}); point the run at an empty folder "
            "or build the model it was saved from")
    return meta


@contextlib.contextmanager
def atomic_step_dir(root: Path, step: int, meta: dict, is_writer: bool = True,
                    barrier=None):
    """Yield ``step-NNNNNN.tmp``; rename it to ``step-NNNNNN`` on success.

    Every rank enters; ``is_writer`` (rank 0) clears a stale ``.tmp``,
    writes the metadata last and renames. ``barrier`` (a callable) keeps
    the other ranks from writing before the folder is clean and from
    going on before the rename. On an error the ``.tmp`` is removed and a
    :class:`CheckpointError` names the cause (a full disk says so).
    """
    final = step_dir(root, step)
    tmp = final.with_name(final.name + ".tmp")
    sync = barrier or (lambda: None)
    if is_writer:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    sync()
    try:
        yield tmp
        sync()   # every rank's shard is on disk
        if is_writer:
            _write_json(tmp / META, {"step": step, **meta,
                                     "files": file_sums(tmp)})
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            _fsync_dir(root)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # DCP's CheckpointException is one
        if is_writer:
            shutil.rmtree(tmp, ignore_errors=True)
        full = (getattr(e, "errno", None) == errno.ENOSPC
                or os.strerror(errno.ENOSPC) in str(e))
        ro = (getattr(e, "errno", None) == errno.EROFS
              or os.strerror(errno.EROFS) in str(e))
        what = (f"disk full at {root}" if full else f"read-only at {root}"
                if ro else _first_line(e))
        raise CheckpointError(f"checkpoint of step {step} in {root} not "
                              f"written: {what}; the half-written folder was "
                              "removed, the last complete checkpoint is "
                              f"{latest_checkpoint(root)}") from e
    sync()


def _first_line(e: BaseException) -> str:
    """The error in one line: DCP's ``CheckpointException`` prints a dict of
    wrapped exceptions per rank (its first line a pybind repr); the first
    rank's own exception says what went wrong."""
    failures = getattr(e, "failures", None)
    if isinstance(failures, dict) and failures:
        rank, wrapped = next(iter(sorted(failures.items())))
        inner = wrapped[0] if isinstance(wrapped, tuple) else wrapped
        if isinstance(inner, BaseException):
            return f"rank {rank}: {type(inner).__name__}: " + (
                str(inner).splitlines() or [""])[0]
    # the type too: a fake tensor's limit (DataDependentOutputException)
    # may carry only an operator's repr
    return f"{type(e).__name__}: " + (str(e).splitlines() or [repr(e)])[0]


def _write_json(path: Path, data: dict) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
