"""Sphinx extension: the theme's words on Chinese pages, in mainland usage.

The book's theme brings its own Chinese (``sphinx_book_theme``'s zh_CN
catalog writes "Print to PDF" as 列印成 PDF, Taiwan usage), and some of
its words have no Chinese at all (the search box's "Search this
book...", set by jupyter-book). In the Chinese build this puts one small
table in front of those catalogs: a word it holds is said its way, every
other word as the theme's catalog says it. Inert in the English build.

    .venv/bin/python -m pytest tests/test_zh_theme.py -q
"""
from __future__ import annotations

import gettext

# (catalog, English) -> the mainland wording
WORDS = {
    ("booktheme", "Print to PDF"): "打印为 PDF",
    ("sphinx", "Link to this heading"): "链接到此标题",
    ("sphinx", "Link to this equation"): "链接到此公式",
    ("sphinx", "Link to this table"): "链接到此表格",
    ("sphinx", "Link to this image"): "链接到此图片",
    ("sphinx", "Link to this code"): "链接到此代码",
    ("sphinx", "Link to this definition"): "链接到此定义",
    ("sphinx", "Link to this term"): "链接到此术语",
}
SEARCH_BAR = "搜索本书……"


class _First(gettext.NullTranslations):
    """``words`` first, then the catalog it stands in front of."""

    def __init__(self, words: dict[str, str], behind):
        super().__init__()
        self.words = words
        self.add_fallback(behind)

    def gettext(self, message):
        return self.words.get(message) or self._fallback.gettext(message)

    def ngettext(self, singular, plural, n):
        if n == 1 and singular in self.words:
            return self.words[singular]
        return self._fallback.ngettext(singular, plural, n)


def _zh(app) -> bool:
    return (app.config.language or "").lower().startswith("zh")


def install(app) -> None:
    """Put ``WORDS`` in front of each catalog it names (Chinese build)."""
    from sphinx.locale import init, translators
    if not _zh(app):
        return
    for catalog in sorted({c for c, _ in WORDS}):
        behind, _ = init([], app.config.language, catalog)
        if isinstance(behind, _First):
            continue
        words = {m: w for (c, m), w in WORDS.items() if c == catalog}
        translators["general", catalog] = _First(words, behind)


def page(app, pagename, templatename, context, doctree):
    if _zh(app):
        context["theme_search_bar_text"] = SEARCH_BAR


def setup(app):
    app.connect("builder-inited", install)
    app.connect("html-page-context", page, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
