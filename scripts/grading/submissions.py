"""The handed-in folder: which files, whose, for which lab.

    items = collect(folder)              # [Item(path, student, refusal)]
    lab, nb, note = identify(path, labs, pinned=None)

Symbolic links are refused with a reason, never followed (a git repository
or an archive a student hands in can carry one to the answer key); so are
files in hidden folders (``.git``).

One source names every student of a run (``name_students``): the folder
a file sits in when the handed-in folder holds per-student folders (a
file beside them is refused in one line: it would join another
student's row), else Canvas's download name
``login_userid_submissionid_name.ipynb`` (``login_LATE_...`` too) when
every file has one (its user id becomes the gradebook's Canvas ID; one
login with two user ids is refused), else each file's own name. Two
students whose ids differ but whose feedback files would share a name
(``g22 eve``, ``g22_eve``) are refused in one line, before anything runs.

One submission per student and lab is graded (``newest``): the newest
by Canvas's submission id where both are Canvas's, else by modification
time, then by name; the others are listed with that reason, never
added up.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

CANVAS = re.compile(r"^(?P<login>[^_]+?)(?:_LATE)?_(?P<uid>\d+)_(?P<sid>\d+)_"
                    r"(?P<name>.+)$")


class BadInput(Exception):
    """Nothing can be graded: one line, exit status 2."""


@dataclass
class Item:
    path: Path
    rel: str            # the file's name in the folder (the CSV's)
    student: str        # the gradebook's student id
    refusal: str = ""   # why it is not graded at all


def feedback_name(student: str) -> str:
    """The feedback file's stem for ``student`` (``report.feedback``)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", str(student))[:80] or "_"


def name_students(items: list[Item]) -> tuple[str, dict]:
    """Each item's student from the run's one source (the docstring):
    (the source's name, {student: Canvas user id}); BadInput for a file
    beside per-student folders, a login with two user ids, two ids
    that share a feedback file."""
    flat = [i for i in items if len(Path(i.rel).parts) == 1]
    if len(flat) < len(items):
        if flat:
            raise BadInput(
                f"{len(flat)} file(s) beside the per-student folders (e.g. "
                f"{flat[0].rel!r}): put each in its student's folder")
        source = "folder"
    elif all(CANVAS.match(i.rel) for i in items):
        source = "canvas"
    else:
        source = "file name"
    uids: dict = {}
    for i in items:
        rel = Path(i.rel)
        i.student = rel.parts[0] if source == "folder" else (
            CANVAS.match(rel.name)["login"] if source == "canvas"
            else rel.stem)
        if source == "canvas":
            uid = CANVAS.match(rel.name)["uid"]
            if uids.setdefault(i.student, uid) != uid:
                raise BadInput(f"Canvas login {i.student!r} has two user "
                               f"ids ({uids[i.student]}, {uid}): one "
                               "student per login")
    seen: dict = {}
    for who in sorted({i.student for i in items}):
        key = feedback_name(who).casefold()
        if key in seen:
            raise BadInput(f"students {seen[key]!r} and {who!r} would share "
                           f"feedback/{feedback_name(who)}.md: rename one")
        seen[key] = who
    return source, uids


def newest(items: list[Item]) -> Item:
    """The one of a student's files for one lab that is graded."""
    def when(i: Item):
        m = CANVAS.match(Path(i.rel).name)
        canvas = all(CANVAS.match(Path(j.rel).name) for j in items)
        try:
            mtime = i.path.lstat().st_mtime
        except OSError:
            mtime = 0.0
        return (int(m["sid"]) if canvas else mtime, i.rel)
    return max(items, key=when)


def student_of(rel: Path) -> str:
    if len(rel.parts) > 1:
        return rel.parts[0]
    m = CANVAS.match(rel.name)
    return m["login"] if m else rel.stem


def collect(folder: Path) -> list[Item]:
    if folder.is_symlink() or not folder.is_dir():
        raise BadInput(f"no such folder: {folder}")
    out = []
    for top, dirs, files in os.walk(folder, followlinks=False):
        here = Path(top)
        keep = []
        for d in sorted(dirs):
            if d.startswith("."):
                continue
            if (here / d).is_symlink():
                files.append(d)   # refused below, like a file link
            else:
                keep.append(d)
        dirs[:] = keep
        for f in sorted(files):
            p = here / f
            rel = p.relative_to(folder)
            if f.startswith("."):
                continue
            refusal = ""
            if p.is_symlink():
                refusal = ("a symbolic link, not a file: hand in the "
                           "notebook itself (links are never followed)")
            elif not p.is_file():
                refusal = "not a regular file"
            out.append(Item(p, str(rel), student_of(rel), refusal))
    if not out:
        raise BadInput(f"{folder} holds no submission")
    return sorted(out, key=lambda i: i.rel)


def pin(name: str | None, labs: set[str]) -> str | None:
    """``--lab NAME`` (``03_sharding`` or ``sharding``) as a lab, or
    BadInput."""
    if not name:
        return None
    hit = [lab for lab in labs if name in (lab, lab.partition("_")[2])]
    if len(hit) != 1:
        raise BadInput(f"--lab {name}: no such assignment (known: "
                       f"{', '.join(sorted(labs))})")
    return hit[0]


def identify(path: Path, labs: set[str], pinned: str | None = None
             ) -> tuple[str | None, dict | None, str]:
    """(lab or None, notebook or None, note) for one handed-in file."""
    lab, nb, note = _identify(path, labs)
    if pinned and lab != pinned:
        got = f"a notebook of {lab}" if lab else note or "not this lab"
        return pinned, None, (f"{got}, handed in for {pinned} (make grade "
                              f"--lab {pinned}): not graded")
    return lab, nb, note


def _identify(path, labs):
    stem = CANVAS.match(path.name)
    stem = Path(stem["name"]).stem if stem else path.stem
    by_name = next((lab for lab in sorted(labs, key=len, reverse=True)
                    if stem.startswith(lab)), None)
    if path.suffix != ".ipynb":
        return by_name, None, ("not a notebook (.ipynb): hand in the "
                               "assignment notebook")
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(nb, dict) or "nbformat" not in nb:
            raise ValueError("no nbformat field")
    except (ValueError, UnicodeDecodeError) as e:
        return by_name, None, f"not a notebook ({str(e).splitlines()[0][:80]})"
    if nb.get("nbformat") != 4:
        return by_name, None, (f"a notebook of format {nb.get('nbformat')!r}"
                               ": save it as a Jupyter notebook (format 4)")
    meta = nb.get("metadata", {})
    meta = meta.get("otter", {}) if isinstance(meta, dict) else {}
    meta = meta.get("assignment_name") if isinstance(meta, dict) else None
    if meta in labs:
        note = "" if by_name == meta else (
            f"file name does not name the lab; graded as {meta} "
            "from its metadata")
        return meta, nb, note
    if by_name is None:
        return None, None, f"unknown lab (known: {', '.join(sorted(labs))})"
    return by_name, nb, ""
