"""The two built editions correspond page by page (scripts/book_zh.py).

Runs after ``make book`` (``_build/html`` and ``_build/html/zh``);
skipped when there is no Chinese build, failed when ``LABKIT_ZH_BUILT`` says
there should be one. For every page of both editions:

- each page links its twin in the other language, and the twin exists;
- the glued values (``{glue:text}``) are the same multiset (a translation
  may reorder a sentence), the code cells' outputs and the figures the
  same in the same order: one computation, two languages;
- section, exercise, solution, admonition, table and figure counts match;
- on a translated page (not in ``locale/zh_CN/UNTRANSLATED``): the numbers
  of the prose are the same multiset, and no paragraph, heading or table
  cell is left in English;
- no text code generated on a Chinese page (a table's cells, a figure's
  text, a glued phrase, the words inside a formula) holds an English
  sentence (``labkit.twins.sentence``: three English words in a row, less
  proper names, identifiers and units). A chapter's printed output stays
  as the command prints it.
"""
import copy
import functools
import os
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from labkit.twins import sentence
from labkit.words import untwin

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import zh_catalogs as Z  # noqa: E402

sys.path.insert(0, str(ROOT / "book" / "_ext"))
import calc_core  # noqa: E402

EN = ROOT / "_build" / "html"
ZH = EN / "zh"
ZH_ONLY = {p.stem for p in (ROOT / "locale" / "zh_CN" / "pages").glob("*.md")}
# The calculators are left out of the prose checks (their tables are the
# command's output: keys are identifiers); their own words are checked by
# test_calculators_speak_... The lab stamp is said in the page's language
# (book/_ext/lab_stamp.py): a prose paragraph like any other.
# a planner layout's name (labkit.predict.choosing.layout_cost.Layout.name), an
# identifier a glued table shows as a row label: the same in both languages
LAYOUT_NAME = re.compile(r"^tp\d+(\+sp)? pp\d+(\[[^\]]+\])?( cp\d+)? dp\d+ "
                         r"\S+ b\d+x\d+ recompute=\w+( offload=\w+)?$")


def _pages() -> list[str]:
    if not (ZH / "index.html").exists():
        if os.environ.get("LABKIT_ZH_BUILT"):
            pytest.fail("the Chinese edition should be built, but "
                        "_build/html/zh is missing")
        pytest.skip("no Chinese build: python scripts/build_book.py "
                    "(make book)")
    return sorted(p.relative_to(ZH).with_suffix("").as_posix()
                  for p in ZH.glob("*/*.html")
                  if p.parent.name in ("book", "labs"))


@functools.lru_cache(maxsize=None)
def _article(path: Path):
    """A page parsed once for the whole module (six tests read every page
    of both editions; html.parser is the slow part). Read-only: a test
    that changes the tree works on :func:`_prose_blocks`' copy."""
    from bs4 import BeautifulSoup
    soup = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
    return soup, soup.select_one("article.bd-article")


def _text(el) -> str:
    return " ".join(el.get_text(" ").split())


def _output(el) -> str:
    """A cell output's text, a result table's column titles left out (they
    are in the page's language: book/_ext/lab_results.py)."""
    for head in el.select("table.labkit-results thead"):
        head.decompose()
    return _text(el)


def pairs(translated_only=False):
    todo = set(Z.untranslated())
    for page in _pages():
        if page.rpartition("/")[2] in ZH_ONLY and page.startswith("book/"):
            continue
        if translated_only and page in todo:
            continue
        yield page, _article(EN / f"{page}.html"), _article(ZH / f"{page}.html")


def test_every_page_links_its_twin():
    bad = []
    for page in _pages():
        for here, there in ((EN, ZH), (ZH, EN)):
            f = here / f"{page}.html"
            if not f.exists():
                if here is EN and page.rpartition("/")[2] in ZH_ONLY:
                    continue
                bad.append(f"{f.relative_to(EN.parent)}: missing")
                continue
            soup, _ = _article(f)
            a = soup.select_one("p.lang-switch a")
            if here is ZH and page.rpartition("/")[2] in ZH_ONLY:
                if a is not None:
                    bad.append(f"{page}: Chinese only, but links a twin")
                continue
            target = (f.parent / a["href"]).resolve() if a else None
            if target != (there / f"{page}.html").resolve():
                bad.append(f"{f.relative_to(EN.parent)}: switch -> "
                           f"{a['href'] if a else None}")
    assert not bad, "\n".join(bad)


def test_same_glued_values_outputs_and_figures():
    bad = []
    for page, (_, en), (_, zh) in pairs():
        a, b = (Counter(_text(x) for x in art.select("span.pasted-text"))
                for art in (en, zh))     # a translation may reorder them
        en_only, zh_only = untwin(a - b, b - a)   # a word, its __zh twin
        if en_only or zh_only:
            bad.append(f"{page}: glued values: English only {dict(en_only)}, "
                       f"Chinese only {dict(zh_only)}")
        for what, sel, get in (
                ("cell outputs", "div.cell_output", _output),
                ("figures", "img", lambda i: Path(i.get("src", "")).stem)):
            a = [get(x) for x in en.select(sel)]
            b = [get(x) for x in zh.select(sel)]
            if what == "figures":     # a figure's twin: its own SVG
                a, b = len(a), len(b)
            if a != b and what == "cell outputs" and len(a) == len(b):
                # a table's twin (labkit.twins): its words in Chinese,
                # every number the same
                a, b = ([sorted(Z.NUMBER.findall(x)) for x in y]
                        for y in (a, b))
            if a != b and what == "figures":
                bad.append(f"{page}: {a} figures in English, {b} in "
                           "Chinese")
            elif a != b:
                first = next((i for i, (x, y) in enumerate(zip(a, b))
                              if x != y), min(len(a), len(b)))
                bad.append(f"{page}: {what} differ at #{first} "
                           f"({len(a)} English, {len(b)} Chinese): "
                           f"{a[first:first + 1]} vs {b[first:first + 1]}")
    assert not bad, "\n".join(bad)


def test_same_structure():
    bad = []
    for page, (_, en), (_, zh) in pairs():
        for what, sel in (("sections", "section"), ("h2", "h2"),
                          ("h3", "h3"), ("exercises", "div.exercise"),
                          ("solutions", "div.solution"),
                          ("admonitions", "div.admonition"),
                          ("tables", "table"), ("code cells", "div.cell"),
                          ("equations", "div.math")):
            a, b = len(en.select(sel)), len(zh.select(sel))
            if a != b:
                bad.append(f"{page}: {a} {what} in English, {b} in Chinese")
        ids = [[d.get("id") for d in x.select("div.exercise")]
               for x in (en, zh)]
        if ids[0] != ids[1]:
            bad.append(f"{page}: exercises {ids[0]} vs {ids[1]}")
    assert not bad, "\n".join(bad)


def _prose_blocks(article):
    article = copy.copy(article)    # a copy: the parsed page is shared
    for el in article.select("div.cell_output, pre, p.lang-switch, "
                             "a.headerlink, div.labkit-calculator"):
        el.decompose()
    for el in article.find_all(["p", "h1", "h2", "h3", "h4", "th", "td",
                                "dt", "figcaption", "caption", "li"]):
        if el.name == "li" and el.find("p"):
            continue
        yield el


def test_translated_pages_keep_every_number():
    bad = []
    for page, (_, en), (_, zh) in pairs(translated_only=True):
        a, b = (Counter(n for el in _prose_blocks(x)
                        for n in Z.NUMBER.findall(_text(el)))
                for x in (en, zh))
        if a != b:
            bad.append(f"{page}: English only {dict(a - b)}, Chinese only "
                       f"{dict(b - a)}")
    assert not bad, "\n".join(bad)


def test_no_english_prose_left_on_translated_pages():
    bad = []
    for page, _, (_, zh) in pairs(translated_only=True):
        for el in _prose_blocks(zh):
            for c in el.select("code, span.math, span.pasted-text"):
                c.replace_with(" ")
            text = _text(el)
            if text and Z.prose(text) and not Z.CJK.search(text) \
                    and not LAYOUT_NAME.match(text):
                bad.append(f"{page}: <{el.name}> \"{text[:70]}\"")
    assert not bad, "\n".join(bad)


def test_calculators_speak_the_pages_language():
    """The same calculators on both editions (same command, same worked
    example), their words in the page's language (calc_core.LABELS)."""
    bad, seen = [], 0
    for page, (_, en), (_, zh) in pairs():
        boxes = [x.select("div.labkit-calculator") for x in (en, zh)]
        if [b.get("data-calculator") for b in boxes[0]] != \
                [b.get("data-calculator") for b in boxes[1]]:
            bad.append(f"{page}: not the same calculators")
            continue
        for lang, found in zip(("en", "zh"), boxes):
            for box in found:
                seen += 1
                cmd = box.select_one("p.calc-command")
                if box.get("data-lang") != lang or not _text(cmd).startswith(
                        calc_core.LABELS[lang]["worked"].strip()):
                    bad.append(f"{page}: a {box['data-calculator']} "
                               f"calculator not in {lang}: {_text(cmd)[:40]}")
        for a, b in zip(*boxes):
            if a.select_one("p.calc-command code").get_text() != \
                    b.select_one("p.calc-command code").get_text():
                bad.append(f"{page}: the worked examples differ")
    assert seen and not bad, "\n".join(bad)


def _svg_texts(page: Path, img) -> list[str]:
    """The text elements of a figure's SVG twin (a title, a label, a
    legend entry, a tick)."""
    import html
    src = (page.parent / img.get("src", "")).resolve()
    if src.suffix != ".svg" or not src.exists():
        return []
    return [html.unescape(t) for t in re.findall(
        r"<text\b[^>]*>([^<]*)</text>", src.read_text(encoding="utf-8"))]


def test_no_english_sentence_in_generated_text():
    """Tables, figures, glued phrases and the words in formulas, on every
    Chinese page: the twins (labkit.twins, book/_ext/zh_twins.py) carry
    the Chinese of locale/zh_CN/generated.po."""
    bad, seen = [], Counter()
    for page, _, (_, zh) in pairs():
        path = ZH / f"{page}.html"
        found = []
        for out in zh.select("div.cell_output, div.pasted-block, figure"):
            for c in out.select("th, td, caption"):
                found.append(("table", _text(c)))
            for img in out.select("img"):
                found.append(("figure", ""))
                found += [("figure", t) for t in _svg_texts(path, img)]
        found += [("glued", _text(g)) for g in zh.select("span.pasted-text")]
        for m in zh.select("span.math, div.math"):
            found += [("formula", x) for x in re.findall(
                r"\\text\{([^{}]*)\}", m.get_text())]
        for kind, text in found:
            seen[kind] += 1
            run = sentence(text)
            if run:
                bad.append(f"{page}: {kind}: \"{run}\" in \"{text[:70]}\"")
    assert seen["table"] and seen["figure"] and not bad, "\n".join(bad)
