"""A lab's ``results.json`` checked where it is read: its schema, its sums.

    records = read(run / "results.json")      # ResultsError: one line
    sums = checksums(run, files)              # at the lab's completion
    verify(run)                               # the sums still hold

``results.json`` is what :meth:`labkit.lab.Results.save` writes: a
non-empty list of records, each with the fields of
:data:`labkit.lab.FIELDS` plus ``device`` and ``profile`` -- ``quantity``,
``strategy``, ``unit``, ``device`` and ``profile`` strings, ``world_size``
an integer, ``predicted``, ``measured`` and ``ratio`` numbers or null.
A truncated file, garbage, valid JSON of another shape or a missing file
is one :class:`ResultsError` naming the file and what is wrong, so the
book build stops (unless ``--partial``) and a bundle refuses, instead of
a page that silently loses its numbers. The runner stores the SHA-256 of
a run's files in its ``run.json`` when the lab completes (``sha256``);
:func:`verify` compares them, so a file damaged later is named too (a
bundle's sums are the run's, not taken from the damaged copy).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

TEXT = ("quantity", "strategy", "unit", "device", "profile")
NUMBERS = ("predicted", "measured", "ratio")


class ResultsError(ValueError):
    """A damaged, missing or misshapen results file (one line)."""


def _record_problem(i: int, rec) -> str | None:
    if not isinstance(rec, dict):
        return f"record {i} is a {type(rec).__name__}, not an object"
    for k in TEXT:
        if not isinstance(rec.get(k), str):
            return f"record {i}: {k!r} missing or not a string"
    ws = rec.get("world_size")
    if isinstance(ws, bool) or not isinstance(ws, int) or ws < 0:
        return f"record {i}: 'world_size' missing or not an integer"
    for k in NUMBERS:
        if k not in rec:
            return f"record {i}: {k!r} missing"
        v = rec[k]
        if v is not None and (isinstance(v, bool) or not isinstance(
                v, (int, float))):
            return f"record {i}: {k!r} is {type(v).__name__}, not a number"
    return None


def validate(records, where="results.json") -> list[dict]:
    if not isinstance(records, list) or not records:
        raise ResultsError(f"{where}: damaged (not a non-empty list of "
                           "records)")
    for i, rec in enumerate(records):
        problem = _record_problem(i, rec)
        if problem:
            raise ResultsError(f"{where}: damaged ({problem})")
    return records


def read(path: str | Path) -> list[dict]:
    """The records of ``path``, checked; :class:`ResultsError` if not."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ResultsError(f"{path}: missing") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ResultsError(f"{path}: unreadable ({e})") from None
    try:
        records = json.loads(text)
    except (ValueError, RecursionError) as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ResultsError(f"{path}: damaged, not JSON (truncated? "
                           f"{why})") from None
    return validate(records, str(path))


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def checksums(folder: str | Path, names) -> dict[str, str]:
    """``{name: SHA-256}`` of the files of ``folder`` that exist."""
    folder = Path(folder)
    return {n: sha256(folder / n) for n in names if (folder / n).is_file()}


def stored(folder: str | Path) -> dict[str, str] | None:
    """The sums the runner stored in ``run.json`` (None: none stored)."""
    try:
        sums = json.loads((Path(folder) / "run.json").read_text()).get(
            "sha256")
    except (OSError, ValueError, AttributeError):
        return None
    return sums if isinstance(sums, dict) else None


def verify(folder: str | Path) -> dict[str, str] | None:
    """Check ``folder``'s results.json and the stored sums of its files;
    return the sums (None where the run stored none)."""
    folder = Path(folder)
    read(folder / "results.json")
    sums = stored(folder)
    for name, digest in (sums or {}).items():
        f = folder / name
        if not f.is_file():
            raise ResultsError(f"{f}: missing (the run stored its "
                               "SHA-256)")
        if sha256(f) != digest:
            raise ResultsError(f"{f}: damaged (its SHA-256 differs from "
                               "the one stored when the lab completed)")
    return sums
