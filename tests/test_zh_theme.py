"""The theme's words on the Chinese pages (book/_ext/zh_theme.py).

Unit: the table stands in front of a catalog and leaves the rest to it.
Built (``_build/html/zh``; skipped without it, failed when
``LABKIT_ZH_BUILT`` says there should be one): no Chinese page says the
theme's English ("Search this book...", "Link to this heading") or its
Taiwan wording (列印成 PDF); each says 打印为 PDF.

    .venv/bin/python -m pytest tests/test_zh_theme.py -q
"""
from __future__ import annotations

import gettext
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ZH = ROOT / "_build" / "html" / "zh"
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import zh_theme  # noqa: E402

ENGLISH = ["Search this book", "Link to this heading", "列印成"]


class _Catalog(gettext.NullTranslations):
    def gettext(self, message):
        return {"Print to PDF": "列印成 PDF", "Contents": "目录"}.get(
            message, message)


def test_the_table_goes_first_the_catalog_after():
    t = zh_theme._First({"Print to PDF": "打印为 PDF"}, _Catalog())
    assert t.gettext("Print to PDF") == "打印为 PDF"
    assert t.gettext("Contents") == "目录"
    assert t.gettext("Other") == "Other"
    assert all("\u4e00" <= w[0] <= "\u9fff" or w[0].isascii()
               for w in zh_theme.WORDS.values())


def test_no_chinese_page_says_the_themes_english():
    if not (ZH / "index.html").exists():
        if os.environ.get("LABKIT_ZH_BUILT"):
            pytest.fail("the Chinese edition should be built, but "
                        "_build/html/zh is missing")
        pytest.skip("no Chinese build: python scripts/build_book.py")
    bad, pdf = [], 0
    for page in sorted(ZH.glob("**/*.html")):
        text = page.read_text()
        bad += [f"{page.relative_to(ZH)}: {w}" for w in ENGLISH if w in text]
        pdf += "打印为 PDF" in text
    assert not bad, bad[:20]
    assert pdf, "no Chinese page has the theme's 打印为 PDF button"
