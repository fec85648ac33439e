"""Where the lab runner keeps its runs: a good result is never lost.

    run = start(profile_dir, "memory")        # memory.<stamp>.running/
    ...execute the notebook into run...
    current, kept = finish(run, "ok")          # -> memory/ (the old one kept)
    folder, note = last_complete(profile_dir, "memory")   # for bundles, book

Every run writes into a fresh folder ``<lab>.<stamp>.running`` (with
``running.json``: who runs it). It becomes ``<lab>/``, the current run,
only when it completed with status ok: the earlier current run is first
renamed ``<lab>.<its stamp>``, then the new folder renamed ``<lab>``.
A run that failed is kept as ``<lab>.<stamp>.failed``; one stopped by a
signal as ``<lab>.<stamp>.interrupted``; one whose runner was SIGKILLed
keeps its ``.running`` name until :func:`label_interrupted` (called by the
runner, the bundler and the book build) finds its runner gone and renames
it by what its ``run.json`` says: ``.interrupted`` (no verdict), ``.failed``
(the lab failed, then its runner died), or -- a runner killed inside
:func:`finish`, after ``run.json`` said ok and its files' checksums were
stored -- the complete run restored as current, and said
(:func:`said`). None of them ever shadows the last complete run:
:func:`last_complete` returns ``<lab>/`` if it completed, else the newest
complete ``<lab>.<stamp>`` (after a crash between the two renames), and
says when a newer run was left out.

Two runs finishing at once cannot undo each other: the renames of
:func:`finish` and :func:`label_interrupted` hold ``.<profile>.finish.lock`` (an
exclusive ``flock``) beside the profile's folder, and :func:`start` never
reuses a folder another run has just made.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import socket
from pathlib import Path

RUNNING, FAILED, INTERRUPTED = ".running", ".failed", ".interrupted"


def _stamp(when: float | None = None) -> str:
    t = dt.datetime.fromtimestamp(when) if when else dt.datetime.now()
    return f"{t:%Y%m%d-%H%M%S}"


def _unused(path: Path, suffix: str = "") -> Path:
    dest, n = path.with_name(path.name + suffix), 1
    while dest.exists():
        dest, n = path.with_name(f"{path.name}-{n}{suffix}"), n + 1
    return dest


def lab_of(folder: Path) -> str:
    """``memory.20261201-023000.running`` -> ``memory``."""
    return folder.name.split(".", 1)[0]


def status(folder: Path) -> str | None:
    """``run.json``'s status: "ok" for a complete run; None without it."""
    try:
        return json.loads((folder / "run.json").read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        return None


@contextlib.contextmanager
def _renaming(profile_dir: Path):
    """Hold the profile folder's rename lock (one finisher at a time)."""
    profile_dir = Path(profile_dir)
    fd = os.open(profile_dir.parent / f".{profile_dir.name}.finish.lock",
                 os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)   # closing drops the flock


def start(profile_dir: Path, lab: str) -> Path:
    """A fresh folder for a new run of ``lab``, marked as running."""
    Path(profile_dir).mkdir(parents=True, exist_ok=True)
    while True:
        run = _unused(Path(profile_dir) / f"{lab}.{_stamp()}", RUNNING)
        try:
            run.mkdir()
            break
        except FileExistsError:   # another runner's, made just now
            continue
    (run / "running.json").write_text(json.dumps(
        {"pid": os.getpid(), "host": socket.gethostname(),
         "boot": _boot_id(), "started": _stamp()}))
    return run


def finish(run: Path, outcome: str) -> tuple[Path, Path | None]:
    """Put a finished run where it belongs: its new path, and where the
    earlier current run went (if it moved).

    ``outcome`` "ok": it becomes ``<lab>/`` (the earlier one is kept under
    its time stamp); "failed" or "interrupted": ``<lab>.<stamp>.<outcome>``.
    """
    with _renaming(run.parent):
        base = run.with_name(run.name[:-len(RUNNING)] if run.name.endswith(
            RUNNING) else run.name)
        if outcome != "ok":
            dest = _unused(base, "." + outcome)
            os.rename(run, dest)
            (dest / "running.json").unlink(missing_ok=True)
            return dest, None
        current = run.with_name(lab_of(run))
        previous = keep_previous(current)
        os.rename(run, current)
        (current / "running.json").unlink(missing_ok=True)
        return current, previous


def keep_previous(folder: Path) -> Path | None:
    """Move a run aside as ``<lab>.<timestamp>`` and say where."""
    if not folder.exists():
        return None
    dest = _unused(folder.with_name(
        f"{folder.name}.{_stamp(folder.stat().st_mtime)}"))
    folder.rename(dest)
    return dest


def label_interrupted(profile_dir: Path) -> list[Path]:
    """Rename ``*.running`` runs whose runner is gone by what they hold
    (module docstring); their new paths, for :func:`said`."""
    labelled = []
    for run in sorted(Path(profile_dir).glob(f"*{RUNNING}")):
        if run.is_dir() and not _runner_alive(run):
            with contextlib.suppress(FileNotFoundError):  # a finisher's
                labelled.append(_recover(run))
    return labelled


def _recover(run: Path) -> Path:
    """A dead runner's run, put where what it holds says."""
    from labkit.results import labfaults, resultsfile
    labfaults.remove_connection_files(run)   # a SIGKILLed kernel's
    verdict = status(run)
    if verdict == "ok":
        try:
            resultsfile.verify(run)
        except resultsfile.ResultsError:
            verdict = None
    if verdict != "ok":
        return finish(run, "failed" if verdict == "FAILED"
                      else INTERRUPTED[1:])[0]
    current = run.with_name(lab_of(run))
    if status(current) == "ok" and _finished(current) > _finished(run):
        with _renaming(run.parent):    # a newer complete run is current
            dest = _unused(run.with_name(run.name[:-len(RUNNING)]))
            os.rename(run, dest)
            (dest / "running.json").unlink(missing_ok=True)
            return dest
    return finish(run, "ok")[0]


def said(run: Path) -> str:
    """The line that says what :func:`label_interrupted` did to ``run``."""
    if run.name == lab_of(run):
        return (f"{run.name}: a complete run whose runner died while "
                f"finishing it: restored as {run.name}/ (current)")
    if run.name.endswith(FAILED):
        return f"an earlier run failed (its runner died): kept as {run.name}"
    if run.name.count(".") == 1:
        return (f"a complete run whose runner died while finishing it: "
                f"kept as {run.name} (a newer one is current)")
    return f"an earlier run was interrupted: kept as {run.name}"


def last_complete(profile_dir: Path, lab: str) -> tuple[Path | None, str]:
    """The folder of ``lab``'s last complete run, and a line saying which
    (and what newer run was left out), or (None, why) if there is none."""
    profile_dir = Path(profile_dir)
    current = profile_dir / lab
    runs = [p for p in profile_dir.glob(f"{lab}.*") if p.is_dir()]
    complete = sorted((p for p in runs if p.name.count(".") == 1
                       and status(p) == "ok"), key=_finished)
    chosen = current if status(current) == "ok" else (
        complete[-1] if complete else None)
    since = _finished(chosen) if chosen else ""
    newer = sorted((p for p in runs if p != chosen and status(p) != "ok"
                    and _started(p) > since), key=_started)
    if chosen is None:
        left = f" (runs not complete: {', '.join(p.name for p in newer)})" \
            if newer else ""
        return None, f"{lab}: no complete run in {profile_dir}{left}"
    note = f"{lab}: the last complete run, {chosen.name}/ (finished " \
        f"{since or 'at an unknown time'})"
    if newer:
        note += ("; left out the newer run(s) " + ", ".join(
            f"{p.name} ({_outcome(p)})" for p in newer))
    return chosen, note


def _outcome(run: Path) -> str:
    if run.name.endswith(RUNNING):
        return "still running" if _runner_alive(run) else "interrupted"
    return status(run) or run.name.rsplit(".", 1)[-1]


def _finished(run: Path) -> str:
    try:
        return json.loads((run / "run.json").read_text())["finished"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def _started(run: Path) -> str:
    """ISO time the run began: from its name's stamp."""
    parts = run.name.split(".")
    try:
        t = dt.datetime.strptime(parts[1][:15], "%Y%m%d-%H%M%S")
    except (IndexError, ValueError):
        return ""
    return t.isoformat(timespec="seconds")


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _runner_alive(run: Path) -> bool:
    try:
        who = json.loads((run / "running.json").read_text())
    except (OSError, ValueError):
        return False
    if who.get("host") != socket.gethostname():
        return True   # another machine's run: not ours to judge
    if who.get("boot") != _boot_id():
        return False
    try:
        os.kill(int(who["pid"]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, KeyError, ValueError, TypeError):
        return True
    return True
