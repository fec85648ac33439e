"""The book's exercises, and the student edition without their solutions.

Every chapter 1-7 (and every chapter that has exercises) pairs each
``exercise`` with a ``solution``. The student edition (`make book-student`,
``scripts/build_book.py --student``) must hold no solution text in any file
of its HTML build: pages, search index, JavaScript, sources. The test builds
that edition with the chapters' execution switched off (the glued numbers
are not solution *text*, and executing the chapters is the strict build's
job), then searches every file for every solution's sentences and its
distinctive words (stemmed, as the search index stores them). When
`make test` has built the instructor edition (LABKIT_BOOK_BUILT=1), the same
search must find the solutions there, so the search is known to work.
"""
import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import snowballstemmer
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import build_book  # noqa: E402

BOOK = ROOT / "book"
DIRECTIVE = re.compile(r"^```\{(exercise|solution)\}[^\n]*\n(.*?)^```$",
                       re.M | re.S)
STEM = snowballstemmer.stemmer("english")


def blocks(text: str, kind: str) -> list[str]:
    return [body for k, body in DIRECTIVE.findall(text) if k == kind]


def chapters():
    return sorted(BOOK.glob("[0-9][0-9]_*.md"))


@pytest.mark.parametrize("path", chapters(), ids=lambda p: p.stem)
def test_review_questions_are_exercises_with_solutions(path):
    text = path.read_text()
    if int(path.stem[:2]) > 7 and "{exercise}" not in text:
        pytest.skip("converted by its own issue")
    review = text[text.index("## Review questions"):]
    labels = re.findall(r"^```\{exercise\}\n:label: (\S+)", review, re.M)
    solved = re.findall(r"^```\{solution\} (\S+)", review, re.M)
    assert labels and solved == labels, "one solution per exercise, in order"
    assert not re.search(r"^\d+\. ", review, re.M), "a question left unconverted"
    for body in blocks(review, "solution"):
        assert ":class: dropdown" in body, "solutions fold in the instructor edition"
        assert len(words(body)) >= 25, "a worked solution, not a one-liner"


def words(body: str) -> list[str]:
    """The prose of a directive body: no options, roles, math or code."""
    body = re.sub(r"^:\w+:.*$", " ", body, flags=re.M)
    body = re.sub(r"\{[\w:]+\}`[^`]*`|`[^`]*`|\$[^$]*\$", " ", body)
    return re.findall(r"[A-Za-z][a-z]+", body)


def fragments(body: str) -> list[str]:
    """Runs of plain prose, 30 characters or more, as they render."""
    body = re.sub(r"^:\w+:.*$", " ", body, flags=re.M)
    parts = re.split(r"\{[\w:]+\}`[^`]*`|`[^`]*`|\$[^$]*\$|\*\*?|[()\[\]]",
                     body)
    out = []
    for p in parts:
        p = " ".join(p.split())
        p = re.sub(r"^\W+|\W+$", "", p)
        if len(p) >= 30:
            out.append(p)
    return out


def solution_texts():
    sols, other = [], []
    for path in sorted(BOOK.glob("*.md")):
        text = path.read_text()
        sols += blocks(text, "solution")
        other.append(DIRECTIVE.sub(lambda m: "" if m.group(1) == "solution"
                                   else m.group(0), text))
    for nb in sorted((ROOT / "labs").glob("*.ipynb")):
        other.append(nb.read_text())
    flat = " ".join(" ".join(other).split())
    frags = sorted({f for s in sols for f in fragments(s) if f not in flat})
    elsewhere = {STEM.stemWord(w.lower())
                 for w in re.findall(r"[A-Za-z]+", " ".join(other))}
    distinct = sorted({w.lower() for s in sols for w in words(s)
                       if len(w) >= 6
                       and STEM.stemWord(w.lower()) not in elsewhere})
    return frags, distinct


def searchable(path: Path) -> str:
    text = path.read_text(errors="replace")
    if path.suffix in (".html", ".htm", ".xml", ".svg"):
        text = html.unescape(re.sub(r"<[^>]+>", " ", text))
    return " ".join(text.split())


def leaks(html_dir: Path, frags, distinct) -> dict:
    found = {}
    for f in html_dir.rglob("*"):
        if not f.is_file() or f.suffix in (".png", ".jpg", ".woff", ".woff2",
                                           ".ttf", ".eot", ".ico", ".gif"):
            continue
        text = searchable(f)
        hits = [x for x in frags if x in text]
        if hits:
            found[str(f.relative_to(html_dir))] = hits[:3]
    index = html_dir / "searchindex.js"
    terms = json.loads(re.search(r"Search\.setIndex\((.*)\)",
                                 index.read_text(), re.S).group(1))["terms"]
    stems = [w for w in distinct if STEM.stemWord(w) in terms or w in terms]
    if stems:
        found["searchindex.js (terms)"] = stems[:10]
    return found


@pytest.fixture(scope="module")
def student_html(tmp_path_factory):
    out = tmp_path_factory.mktemp("student") / "_build"
    src = build_book.stage(None, out)
    build_book.stage_handouts(src)
    build_book.student_edition(src)
    cfg = yaml.safe_load((src / "_config.yml").read_text())
    cfg["execute"]["execute_notebooks"] = "off"
    (src / "_config.yml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    r = subprocess.run([str(Path(sys.executable).with_name("jupyter-book")),
                        "build", str(src), "--builder", "html",
                        "--path-output", str(out.parent), "--all"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out / "html"


def test_student_edition_has_no_solution_text(student_html):
    frags, distinct = solution_texts()
    assert len(frags) > 50 and distinct
    assert (student_html / "book" / "01_memory.html").exists()
    assert "ex-memory-bytes" in (student_html / "book" / "01_memory.html"
                                 ).read_text(), "the exercises are there"
    assert not (student_html / "_sources").exists()
    assert not (student_html / "book" / "instructor.html").exists()
    assert leaks(student_html, frags, distinct) == {}


def test_student_edition_publishes_only_html(student_html):
    """book.yml publishes this folder: the pages, no notebook or source
    copy (``jupyter_execute/`` and ``src/`` stay beside it, unpublished),
    and no "Download source file" link to the ``_sources/`` it lacks. The
    only notebooks are the assignments as handed out, which the lab pages
    link (``_downloads/``), one per lab, with no solution in them."""
    import assignments
    handed = sorted(student_html.rglob("*.ipynb"))
    assert sorted(p.name for p in handed) == sorted(
        p.name for p in (ROOT / "labs").glob("[0-9]*_*.ipynb"))
    assert all("_downloads" in p.parts and not assignments.leaked(p)
               for p in handed)
    lab = (student_html / "labs" / "04_zero.html").read_text()
    assert "_downloads/" in lab and "04_zero.ipynb" in lab
    assert not list(student_html.rglob("*.md"))
    assert not any(p.name in ("jupyter_execute", "src", "_sources")
                   for p in student_html.rglob("*") if p.is_dir())
    pages = list(student_html.rglob("*.html"))
    assert pages and not [p for p in pages if "download-source-button"
                          in p.read_text() or "_sources/" in p.read_text()]


@pytest.mark.skipif(not os.environ.get("LABKIT_BOOK_BUILT"),
                    reason="needs the strict book build of make test")
def test_instructor_edition_has_the_solutions():
    frags, distinct = solution_texts()
    found = leaks(ROOT / "_build" / "html", frags, distinct)
    pages = [p for p in found if p.startswith("book/")]
    assert len(pages) >= 7 and "searchindex.js (terms)" in found
