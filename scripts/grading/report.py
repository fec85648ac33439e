"""What grading writes: grades.csv, the gradebook, one feedback file per
student, and the printed summary, all safe to open.

    write(out, rows, meta, only=None)   # -> (csv path, earlier copy kept)
    summary(rows, files)                # the printed table (lines)

Every text cell is ``safe``: control characters (terminal escapes, CR,
bidirectional overrides) are shown as ``\\xNN``, and a CSV cell that
starts with ``= + - @``, a tab or a CR gets a leading ``'`` (no
spreadsheet reads it as a formula). ``--only FILE`` regrades one file and
keeps every other row of the earlier grades.csv.

- ``grades.csv``: one row per question (student, file, lab, question,
  points, max, reason, isolation, when graded, the autograder's commit);
- ``gradebook.csv``: one row per student and lab, total points; the
  columns Canvas's grade import matches on (``Student``, ``ID``, ``SIS
  Login ID``, ``Section``) and Gradescope's (``SID``), then the lab;
- ``feedback/<student>.md``: per question the points, the reason and the
  chapter to read.
"""
from __future__ import annotations

import csv
import re
from pathlib import Path

FIELDS = ("student", "student_file", "lab", "question", "points", "max",
          "reason", "isolation", "graded_at", "autograder")
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e"
                     "\u2066-\u2069]")
FORMULA = ("=", "+", "-", "@", "\t", "\r")


def clean(text) -> str:
    """Control characters shown, not obeyed (the summary, file names)."""
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def cell(value):
    if not isinstance(value, str):
        return value
    raw = value
    value = clean(value)
    return "'" + value if raw.startswith(FORMULA) or \
        value.startswith(FORMULA) else value


def _read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    try:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, csv.Error, UnicodeDecodeError):
        return []
    return rows if rows and set(FIELDS) <= set(rows[0]) else []


def write(out: Path, rows: list[dict], only: set[str] | None = None,
          keep_previous=None):
    out.mkdir(parents=True, exist_ok=True)
    path = out / "grades.csv"
    if only is not None:   # the other students' rows stay as they were
        earlier = [r for r in _read(path) if r["student_file"] not in
                   {cell(f) for f in only}]
        rows = earlier + [{k: cell(v) for k, v in r.items()} for r in rows]
    else:
        rows = [{k: cell(v) for k, v in r.items()} for r in rows]
    kept = keep_previous(path) if keep_previous else None
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    gradebook(out / "gradebook.csv", rows)
    feedback(out / "feedback", rows, only)
    return path, kept


def totals(rows: list[dict]) -> dict:
    """{(student, lab): [points, max, files]}."""
    out: dict = {}
    for r in rows:
        t = out.setdefault((r["student"], r["lab"]), [0.0, 0.0, set()])
        t[0] += float(r["points"] or 0)
        t[1] += float(r["max"] or 0)
        t[2].add(r["student_file"])
    return out


def gradebook(path: Path, rows: list[dict]) -> None:
    from grading.submissions import CANVAS
    tot = totals(rows)
    labs = sorted({lab for _, lab in tot})
    people = sorted({s for s, _ in tot})
    most = {lab: max(t[1] for (_, b), t in tot.items() if b == lab)
            for lab in labs}
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Student", "ID", "SIS Login ID", "SID", "Section"]
                   + [f"{lab} (max {most[lab]:g})" for lab in labs])
        for s in people:
            uid = ""
            for (who, _), t in tot.items():
                for file in t[2] if who == s else ():
                    m = CANVAS.match(Path(str(file)).name)
                    uid = m["uid"] if m else uid
            w.writerow([cell(s), uid, cell(s), cell(s), ""] + [
                f"{tot[s, lab][0]:g}" if (s, lab) in tot else ""
                for lab in labs])


def feedback(folder: Path, rows: list[dict], only=None) -> None:
    folder.mkdir(exist_ok=True)
    by: dict = {}
    for r in rows:
        by.setdefault(r["student"], []).append(r)
    for student, mine in by.items():
        name = re.sub(r"[^A-Za-z0-9._-]", "_", str(student))[:80] or "_"
        lines = [f"# Feedback: {clean(student)}", ""]
        for (s, lab), (got, most, files) in totals(mine).items():
            lines += [f"## {lab}: {got:g} / {most:g}", "",
                      f"Graded {mine[0]['graded_at']} by the autograder "
                      f"at commit {mine[0]['autograder']}; files: "
                      + ", ".join(f"`{clean(x)}`" for x in sorted(files)),
                      "", "| question | points | why | read |",
                      "|---|---|---|---|"]
            for r in (r for r in mine if r["lab"] == lab):
                why = clean(r["reason"]).replace("|", "\\|") or "correct"
                read = f"book/{lab}.md" if re.match(r"\d\d_", lab) else ""
                lines.append(f"| {clean(r['question'])} | {r['points']} / "
                             f"{r['max']} | {why} | {read} |")
            lines.append("")
        (folder / f"{name}.md").write_text("\n".join(lines))


def summary(rows: list[dict], files: list[str]) -> list[str]:
    out = [f"{'student file':36s} {'lab':22s} {'points':>7s} {'max':>5s}  "
           "notes"]
    for student in files:
        mine = [r for r in rows if r["student_file"] == student]
        if not mine:
            continue
        got = sum(float(r["points"]) for r in mine)
        most = sum(float(r["max"] or 0) for r in mine)
        notes = sorted({clean(r["reason"]) for r in mine if r["reason"]})
        out.append(f"{clean(student):36s} {clean(mine[0]['lab']):22s} "
                   f"{got:7.1f} {most:5.0f}  " + " | ".join(notes)[:160])
    return out
