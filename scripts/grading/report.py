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
- ``gradebook.csv``: one row per student, per lab its total points (one
  graded file per student and lab: ``submissions.newest``; a file not
  graded adds nothing) under a header whose maximum is the assignment's
  (``maxima``), never read from the submissions; the columns Canvas's
  grade import matches on (``Student``, ``ID``, ``SIS Login ID``,
  ``Section``) and Gradescope's (``SID``), then the labs;
- ``feedback/<student>.md``: per question the points, the reason and the
  chapter to read; the folder is replaced as a whole each run (nothing
  of an earlier run stays), each file named by the student's id.

Each format gets its own escaping: the summary ``clean`` (terminal), the
CSV files ``cell``, the feedback ``md`` (HTML and Markdown shown as text).
"""
from __future__ import annotations

import csv
import html
import re
import shutil
from pathlib import Path

FIELDS = ("student", "student_file", "lab", "question", "points", "max",
          "reason", "isolation", "graded_at", "autograder")
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e"
                     "\u2066-\u2069]")
FORMULA = ("=", "+", "-", "@", "\t", "\r")


def clean(text) -> str:
    """Control characters shown, not obeyed (the summary, file names)."""
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


def md(text) -> str:
    """Shown as written in Markdown, never read as HTML or Markdown."""
    return MARKDOWN.sub(r"\\\1", html.escape(clean(text), quote=False))


def own(text) -> str:
    """The grader's own names (a lab, a question) in a Markdown table."""
    return clean(text).replace("|", "\\|")


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
          keep_previous=None, maxima: dict | None = None):
    """``maxima``: each lab's points (the assignment's, ``gradebook``)."""
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
    gradebook(out / "gradebook.csv", rows, maxima)
    feedback(out / "feedback", rows, maxima)
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


def gradebook(path: Path, rows: list[dict], maxima=None) -> None:
    from grading.submissions import CANVAS
    tot = totals(rows)
    labs = sorted({lab for _, lab in tot})
    people = sorted({s for s, _ in tot})
    most = most_of(tot, maxima)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Student", "ID", "SIS Login ID", "SID", "Section"]
                   + [f"{lab} (max {most[lab]:g})" for lab in labs])
        for s in people:
            # a Canvas ID only from Canvas's names of this student's own
            uid = next((m["uid"] for (who, _), t in sorted(tot.items())
                        if who == s for file in sorted(t[2])
                        if (m := CANVAS.match(Path(str(file)).name))
                        and m["login"] == s), "")
            w.writerow([cell(s), uid, cell(s), cell(s), ""] + [
                f"{min(tot[s, lab][0], most[lab]):g}" if (s, lab) in tot
                else "" for lab in labs])


def most_of(tot: dict, maxima=None) -> dict:
    """Each lab's maximum: the assignment's (``maxima``), else the most a
    row set of one file gives (a lab without an autograder)."""
    out = {}
    for (_, lab), t in tot.items():
        out[lab] = (maxima or {}).get(lab, max(out.get(lab, 0.0), t[1]))
    return out


def feedback(folder: Path, rows: list[dict], maxima=None) -> None:
    """The folder, replaced: one file per student, nothing else."""
    from grading.submissions import feedback_name
    new = folder.with_name(folder.name + ".new")
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir()
    by: dict = {}
    for r in rows:
        by.setdefault(r["student"], []).append(r)
    for student, mine in by.items():
        tot = totals(mine)
        most = most_of(tot, maxima)
        lines = [f"# Feedback: {md(student)}", ""]
        for (s, lab), (got, _, files) in tot.items():
            lines += [f"## {own(lab)}: {min(got, most[lab]):g} / "
                      f"{most[lab]:g}", "",
                      f"Graded {md(mine[0]['graded_at'])} by the "
                      f"autograder at commit {md(mine[0]['autograder'])};"
                      " files: " + ", ".join(md(x) for x in sorted(files)),
                      "", "| question | points | why | read |",
                      "|---|---|---|---|"]
            for r in (r for r in mine if r["lab"] == lab):
                why = md(r["reason"]) or "correct"
                read = f"book/{lab}.md" if re.match(r"\d\d_", lab) else ""
                most_q = r["max"] if r["max"] not in (None, "") else "-"
                lines.append(f"| {own(r['question'])} | {r['points']} / "
                             f"{most_q} | {why} | {read} |")
            lines.append("")
        (new / f"{feedback_name(student)}.md").write_text("\n".join(lines))
    shutil.rmtree(folder, ignore_errors=True)
    new.rename(folder)


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
