"""The Chinese edition's catalogs: extract, update, check, count.

    python scripts/zh_catalogs.py pot      # English sources -> _build/gettext/*.pot
    python scripts/zh_catalogs.py update   # .pot -> locale/zh_CN/LC_MESSAGES/*.po
    python scripts/zh_catalogs.py check    # every paragraph has its Chinese
    python scripts/zh_catalogs.py stats    # pages, paragraphs, how many done

One page, one catalog: ``locale/zh_CN/LC_MESSAGES/book/01_memory.po``
holds every translatable paragraph, heading, table cell and caption of
``book/01_memory.md`` (Sphinx's gettext builder, ``gettext_compact:
false``), as the English text (msgid) and its Chinese (msgstr). The
Chinese build (``scripts/book_zh.py``) is the same sources with these
catalogs: the code cells, and so every glued number, are the English
page's own.

``update`` merges the English of today into the catalogs: a new paragraph
gets an empty entry, a changed one keeps its old Chinese marked fuzzy
(``#, fuzzy`` with the old English as ``#| msgid``), a removed one goes to
the end as obsolete (``#~``). Sphinx shows the English for an empty or
fuzzy entry; ``check`` fails on it, naming page, paragraph and its first
words. ``check`` also fails where the Chinese keeps English prose or
does not carry the same glued values, code, math, links and numbers as
its English. Pages listed in ``locale/zh_CN/UNTRANSLATED`` are not yet
required (issue 32's work list); a listed page that is complete is an
error too, so that the list only shrinks.

A glued value that is a word ("fits", ``True``) has a Chinese twin: the
chapter glues it with ``labkit.words.glue_words`` as ``key`` and
``key__zh``, and the Chinese paragraph shows ``{glue:text}`key__zh``` where
the English shows ``key``. ``check`` reads the two as the same glued
value, and fails where a Chinese paragraph shows the English twin (or a
twin the page does not glue).

What a paragraph must keep and what counts as prose are the rules of
``scripts/zh_pieces.py``; this file is the catalogs (extract, merge,
check, count) and their command line.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
LOCALE = ROOT / "locale"
LANG = "zh_CN"
SOURCES = ["_config.yml", "_toc.yml", "book", "labs"]

# The rules of a paragraph (what it keeps, what is prose): zh_pieces.py
from zh_pieces import (CJK, NUMBER, pieces, prose,  # noqa: E402,F401
                       twin_problems, twins)
LIST_START = re.compile(r"\d+[.)]\s|[-*+]\s")


def po_dir(locale: Path = LOCALE) -> Path:
    return locale / LANG / "LC_MESSAGES"


@dataclass
class Problem:
    page: str          # book/01_memory
    where: str         # book/01_memory.md line 13 / labs/..ipynb cell 3 line 2
    kind: str
    english: str

    def __str__(self):
        words = " ".join(self.english.split())
        words = words if len(words) <= 70 else words[:67] + "..."
        return f"{self.where}: {self.kind}: \"{words}\""


def where(page: str, locations) -> str:
    for fname, line in locations or []:
        if not line:
            continue
        name = Path(fname).name
        src = f"{page.rpartition('/')[0]}/{name}".lstrip("/")
        if name.endswith(".ipynb") and line >= 10000:
            return f"{src} cell {line // 10000 - 1} line {line % 10000}"
        return f"{src} line {line}"
    name = Path(locations[0][0]).name if locations else page
    return f"{page.rpartition('/')[0]}/{name} (a table cell or caption)"


def read(path: Path):
    from babel.messages.pofile import read_po
    with open(path, "rb") as f:
        return read_po(f, locale=LANG)


def check_page(page: str, pot, po, keys=()) -> list[Problem]:
    """Every prose message of the English page (``pot``) has a Chinese
    translation in ``po`` that is neither empty nor fuzzy, is Chinese,
    and keeps the English's glue, code, math, links and numbers; a glued
    word (``keys``: :func:`twins`) shows its Chinese twin."""
    problems = []
    for m in pot:
        if not m.id or not prose(m.id):
            continue
        loc = where(page, m.locations)
        t = po.get(m.id) if po is not None else None
        if t is None or not t.string:
            problems.append(Problem(page, loc, "no Chinese (missing)", m.id))
        elif t.fuzzy:
            problems.append(Problem(page, loc, "stale Chinese (fuzzy: the "
                                    "English changed)", m.id))
        elif not CJK.search(t.string):
            problems.append(Problem(page, loc, "English left in the "
                                    "Chinese", m.id))
        elif LIST_START.match(t.string):
            # a heading "## 1. Predict": Sphinx re-parses the title alone,
            # and "1. ..." is then a list, so the English stays
            problems.append(Problem(page, loc, "starts like a list item "
                                    "(write 1\\. for 1.)", m.id))
        else:
            problems += [Problem(page, loc, k, m.id)
                         for k in twin_problems(t.string, keys)]
            a, b = pieces(m.id), pieces(t.string)
            for k in a:
                if a[k] != b[k]:
                    lost = sorted((a[k] - b[k]).elements())
                    extra = sorted((b[k] - a[k]).elements())
                    problems.append(Problem(page, loc, f"{k} differs "
                                            f"(English only: {lost}, "
                                            f"Chinese only: {extra})",
                                            m.id))
    return problems


def untranslated(locale: Path = LOCALE) -> list[str]:
    f = locale / LANG / "UNTRANSLATED"
    if not f.exists():
        return []
    return [ln.split("#")[0].strip() for ln in f.read_text().splitlines()
            if ln.split("#")[0].strip()]


def page_twins(page: str, root: Path = ROOT) -> list[re.Pattern]:
    """:func:`twins` of the page's source (``book/13_experts.md``)."""
    for ext in (".md", ".ipynb"):
        src = root / f"{page}{ext}"
        if src.exists():
            return twins(src.read_text(encoding="utf-8"))
    return []


def check(pot_dir: Path, locale: Path = LOCALE,
          root: Path = ROOT) -> list[str]:
    """One line per problem: required pages with a paragraph missing,
    stale or wrong; pages listed as untranslated that are done; catalogs
    of pages that no longer exist."""
    todo = set(untranslated(locale))
    lines = []
    pages = sorted(p.relative_to(pot_dir).with_suffix("").as_posix()
                   for p in pot_dir.rglob("*.pot"))
    for page in pages:
        po_path = po_dir(locale) / f"{page}.po"
        po = read(po_path) if po_path.exists() else None
        probs = check_page(page, read(pot_dir / f"{page}.pot"), po,
                           page_twins(page, root))
        if page in todo:
            if not probs:
                lines.append(f"{page}: fully translated, but listed in "
                             f"locale/{LANG}/UNTRANSLATED: remove it there")
            continue
        lines += [str(p) for p in probs]
    for page in sorted(todo - set(pages)):
        lines.append(f"locale/{LANG}/UNTRANSLATED lists {page}, which is "
                     "not a page of the book")
    for po_path in sorted(po_dir(locale).rglob("*.po")):
        page = po_path.relative_to(po_dir(locale)).with_suffix("")
        if page.as_posix() not in pages:
            lines.append(f"{po_path.relative_to(locale.parent)}: no such "
                         "page in the book (renamed or removed?)")
    return lines


def stats(pot_dir: Path, locale: Path = LOCALE) -> list[tuple]:
    """(page, prose messages, English words, translated) per page."""
    rows = []
    for pot_path in sorted(pot_dir.rglob("*.pot")):
        page = pot_path.relative_to(pot_dir).with_suffix("").as_posix()
        msgs = [m for m in read(pot_path) if m.id and prose(m.id)]
        po_path = po_dir(locale) / f"{page}.po"
        po = read(po_path) if po_path.exists() else None
        bad = {p.english for p in check_page(page, read(pot_path), po)}
        rows.append((page, len(msgs), sum(len(m.id.split()) for m in msgs),
                     sum(m.id not in bad for m in msgs)))
    return rows


def update(pot_dir: Path, locale: Path = LOCALE) -> list[Path]:
    """Merge the .pot files into the .po files (created if missing)."""
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import write_po
    written = []
    for pot_path in sorted(pot_dir.rglob("*.pot")):
        page = pot_path.relative_to(pot_dir).with_suffix("")
        template = read(pot_path)
        for m in template:   # sources relative to the repository root
            m.locations = [(f"{page.parent.as_posix()}/{Path(f).name}", n)
                           for f, n in m.locations]
        po_path = po_dir(locale) / f"{page}.po"
        if po_path.exists():
            po = read(po_path)
        else:
            po = Catalog(locale=LANG, project="Training at Scale",
                         copyright_holder="The Training at Scale course "
                         "authors", fuzzy=False)
        was = {m.string: m.id for m in po if m.id and m.string}
        po.update(template, update_header_comment=False)
        for m in po:     # babel leaves the old English out: a translator
            if m.fuzzy and m.id and not m.previous_id and m.string in was:
                m.previous_id = [was[m.string]]   # needs it (#| msgid)
        po_path.parent.mkdir(parents=True, exist_ok=True)
        with open(po_path, "wb") as f:
            write_po(f, po, width=78, omit_header=False,
                     include_previous=True, sort_output=False)
        written.append(po_path)
    return written


def figure_stand_ins(text: str) -> str:
    """``{glue:figure} key`` as a plain ``{figure}``, for extraction only:
    with nothing executed there is no glued output, MyST-NB drops the
    whole figure and its caption would never reach the catalog. A
    figure keeps the caption's text and line (its image is not read)."""
    return re.sub(r"^(`{3,}|:{3,})\{glue:figure\}\s+(\S+)",
                  r"\1{figure} _glue/\2.png", text, flags=re.M)


def extract(out: Path, root: Path = ROOT, pages: list[str] | None = None
            ) -> Path:
    """Sphinx's gettext builder over the English sources of ``root`` as
    committed (nothing executed: messages come from the text), into
    ``out``; ``pages``: only these (the first is the root page)."""
    import yaml
    src = out / "gettext-src"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    for name in SOURCES:
        p = root / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=shutil.ignore_patterns(
                "__pycache__", ".ipynb_checkpoints", "profiles",
                "assignments"))
        else:
            shutil.copy2(p, src / name)
    for md in (src / "book").glob("*.md"):
        text = md.read_text(encoding="utf-8")
        if "{glue:figure}" in text:
            md.write_text(figure_stand_ins(text), encoding="utf-8")
    cfg = yaml.safe_load((src / "_config.yml").read_text())
    cfg["execute"]["execute_notebooks"] = "off"
    cfg["sphinx"]["config"].update(gettext_compact=False, gettext_uuid=False,
                                   gettext_location=True)
    (src / "_config.yml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    if pages:
        toc = {"format": "jb-article", "root": pages[0]}
        if pages[1:]:
            toc["sections"] = [{"file": p} for p in pages[1:]]
        (src / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))
    pot = out / "_build" / "gettext"
    shutil.rmtree(pot, ignore_errors=True)
    jb = Path(sys.executable).with_name("jupyter-book")
    r = subprocess.run([str(jb), "build", str(src), "--builder", "custom",
                        "--custom-builder", "gettext", "--path-output",
                        str(out), "--all"], capture_output=True, text=True)
    if r.returncode or not pot.is_dir():
        raise SystemExit("gettext extraction failed:\n" + r.stdout[-3000:]
                         + r.stderr[-3000:])
    return pot


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["pot", "update", "check", "stats"])
    ap.add_argument("--out", type=Path, default=ROOT / "_build" / "zh-pot",
                    help="where the .pot files go (default _build/zh-pot)")
    ap.add_argument("--pot", type=Path,
                    help="use these .pot files instead of extracting")
    a = ap.parse_args(argv)
    pot = a.pot or extract(a.out)
    if a.command == "pot":
        print(pot)
    elif a.command == "update":
        for p in update(pot):
            print(p.relative_to(ROOT))
    elif a.command == "stats":
        rows = stats(pot)
        print(f"{'page':32} {'paragraphs':>10} {'words':>7} {'done':>5}")
        for page, n, w, done in rows:
            print(f"{page:32} {n:10} {w:7} {done:5}")
        print(f"{'total':32} {sum(r[1] for r in rows):10} "
              f"{sum(r[2] for r in rows):7} {sum(r[3] for r in rows):5}")
    else:
        lines = check(pot)
        for line in lines:
            print(line)
        if lines:
            print(f"{len(lines)} problem(s); translate in locale/{LANG}/"
                  "LC_MESSAGES/<page>.po (after `update`)", file=sys.stderr)
            return 1
        print("every required paragraph has its Chinese")
    return 0


if __name__ == "__main__":
    sys.exit(main())
