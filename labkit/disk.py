"""Disk faults in one line: a folder checked before a run writes to it, and
a full or read-only disk named as such wherever a write fails.

    from labkit import disk
    disk.check_writable("_build/labs", need_bytes=200e6)  # ValueError
    with disk.said("_build/labs/cpu"):                    # DiskError:
        path.write_text(text)                             # "disk full at
                                                          #  _build/..."
    disk.write_atomic(path, data)       # a temporary name, then renamed

Why: a full disk shows up far from its cause (a provenance stamp that
cannot be read back, a truncated archive under its final name), and a
read-only ``_build/`` as a traceback in whatever wrote first. ``ENOSPC``
and ``EDQUOT`` become ``disk full at PATH``, ``EROFS`` ``read-only at
PATH``, ``EACCES`` ``not writable at PATH``; :class:`DiskError` is an
``OSError`` (callers that catch ``OSError`` still do) with that one line.
"""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from pathlib import Path

MESSAGES = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded",
            errno.EROFS: "read-only", errno.EACCES: "not writable",
            errno.EPERM: "not writable"}
MIN_FREE = 50 * 2 ** 20     # bytes every lab folder needs at least


class DiskError(OSError):
    """A full, read-only or unwritable disk, said in one line."""

    def __str__(self) -> str:
        return self.strerror


def describe(e: OSError, path=None) -> str | None:
    """``disk full at PATH`` (...) for a disk fault, else None."""
    what = MESSAGES.get(e.errno)
    if what is None:
        return None
    where = path or e.filename or "?"
    return f"{what} at {where}"


def as_disk_error(e: OSError, path=None) -> OSError:
    text = describe(e, path)
    return e if text is None else DiskError(e.errno, text)


@contextlib.contextmanager
def said(path):
    """Turn a disk fault raised inside into a :class:`DiskError` naming
    ``path`` (or the file the error names)."""
    try:
        yield
    except DiskError:
        raise
    except OSError as e:
        err = as_disk_error(e, e.filename or path)
        if err is e:
            raise
        raise err from None


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_writable(path, need_bytes: float = MIN_FREE) -> None:
    """Raise ``ValueError`` (one line) unless ``path`` (made if missing)
    takes a file and has ``need_bytes`` free."""
    path = Path(path)
    base = _existing(path.absolute())
    if base.exists() and not base.is_dir():
        raise ValueError(f"not a folder: {base}")
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".labkit-probe-", dir=path)
        try:
            os.write(fd, b"x")
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as e:
        raise ValueError(describe(e, path) or
                         f"cannot write at {path}: {e.strerror}") from None
    free = shutil.disk_usage(path).free
    if free < need_bytes:
        raise ValueError(f"disk full at {path}: {free / 2**20:.0f} MiB "
                         f"free, {need_bytes / 2**20:.0f} MiB needed")


def write_atomic(path, data: bytes | str) -> Path:
    """Write ``data`` to a temporary name beside ``path`` and rename it
    when complete: a failed write never leaves a truncated ``path``."""
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    with said(path):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.",
                                   suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    return path


def lab_folders(profile: str) -> list[Path]:
    """Every folder a lab run writes: its results, the launches' run
    folders, the checkpoints (lab 8 keeps its own under its run folder)."""
    build = Path(__file__).resolve().parent.parent / "_build"
    return [build / "labs" / profile, build / "runs", build / "checkpoints"]
