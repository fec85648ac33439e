"""Sphinx extension: glued numbers inside translated paragraphs.

The Chinese edition (``scripts/book_zh.py``) is the English sources plus
gettext catalogs (``locale/zh_CN/LC_MESSAGES/<page>.po``). Sphinx's
``Locale`` transform parses each translated paragraph as a document of its
own (source ``...:<translated>``), and MyST-NB (PR 600, for its issue 587)
parses that fragment with plain myst-parser. The glue roles in it
(``{glue:text}`key```, ``{glue:md}`key```) then look for the page's glue
data on the fragment, find none and drop the number with "No key ... found
in glue data for this document".

This extension keeps the page's notebook renderer (MyST-NB removes it at
the end of the page's parse) and lends it to the page's translated
fragments, so that a glue role in Chinese reads the value the page's own
code cells glued, through the same MyST-NB code as in English: one value,
computed once, shown in both languages. Nothing changes for a page that
is not translated.
"""
from __future__ import annotations

from myst_nb.sphinx_ import Parser as NbParser

_KEY = "nb_renderer"
_LAST: dict[str, object] = {}    # docname -> the renderer of its last parse


class _KeepRenderer(dict):
    """document.attributes that remembers the renderer MyST-NB pops."""

    def __init__(self, attrs, docname):
        super().__init__(attrs)
        self.docname = docname

    def pop(self, key, *default):
        value = super().pop(key, *default)
        if key == _KEY and value is not None:
            _LAST.clear()        # one page at a time: the one being read
            _LAST[self.docname] = value
        return value


class TranslatedGlueParser(NbParser):
    def parse(self, inputstring, document) -> None:
        env = getattr(document.settings, "env", None) or self.env
        if document.current_source.endswith("<translated>"):
            renderer = _LAST.get(env.docname)
            if renderer is not None:
                document.attributes[_KEY] = renderer
            try:
                return super().parse(inputstring, document)
            finally:
                document.attributes.pop(_KEY, None)
        document.attributes = _KeepRenderer(document.attributes, env.docname)
        try:
            return super().parse(inputstring, document)
        finally:     # a plain dict again: the doctree is pickled
            document.attributes = dict(document.attributes)


def setup(app):
    app.add_source_parser(TranslatedGlueParser, override=True)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
