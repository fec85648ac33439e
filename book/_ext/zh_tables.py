"""Sphinx extension: a glued table in the build's language.

A chapter glues a pandas table with :func:`labkit.words.glue_table`: the
English under ``key``, the same cells with Chinese column and index names
under ``key__zh``. The page writes one ``{glue:figure} key``; in the
Chinese build (``language`` zh_CN, ``scripts/book_zh.py``) this extension
rewrites that directive, as the page is read, to the twin: the code cells
are untouched, so the jupyter-cache entry the English build made is the
one the Chinese build reads (nothing is executed twice). Only the keys the
page itself glues with ``glue_table(glue, "key", ...)`` are rewritten.
Inert in an English build.
"""
from __future__ import annotations

import re

ZH = "__zh"       # labkit.words.ZH (no labkit import in the extension)
CALL = re.compile(r"""glue_table\(\s*glue\s*,\s*["']([^"']+)["']""")


def twin_tables(text: str) -> str:
    """``text`` (a page's source) with each ``{glue:figure} key`` of a
    ``glue_table`` key pointed at ``key__zh``."""
    for key in set(CALL.findall(text)):
        text = re.sub(r"(\{glue:figure\}[ \t]+)" + re.escape(key)
                      + r"[ \t]*$", r"\g<1>" + key + ZH, text,
                      flags=re.M)
    return text


def _source_read(app, docname, source):
    if (app.config.language or "en").startswith("zh"):
        source[0] = twin_tables(source[0])


def setup(app):
    app.connect("source-read", _source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
