"""Sphinx extension: a Chinese query splits into the words of the index.

Sphinx's Chinese search (``sphinx.search.zh``) segments the pages with
jieba when the book is built, but the reader's query is split in the
browser only at spaces and punctuation: 流水线气泡 stays one term, which
no page's index holds (jieba indexed 流水线 and 气泡), and the search
finds nothing. This language keeps Sphinx's Chinese splitter for the
pages and adds a ``splitQuery`` for the browser: each run of Chinese
characters is cut, longest match first, into words the index holds
(forward maximum matching against the index's own terms and title
terms); Latin words are left whole. Used by the Chinese build
(``html_search_language: zh``, ``locale/zh_CN/config.yml``); the English
build does not use it.

    .venv/bin/python -m pytest tests/test_zh_search.py -q
"""
from __future__ import annotations

from sphinx.search.zh import SearchChinese

# searchtools.js calls splitQuery(query) once the index is loaded
# (Search._index: {terms, titleterms, ...}); it runs before any query.
SPLIT_QUERY = r"""
function splitQuery(query) {
  const idx = (typeof Search !== "undefined" && Search._index) || null;
  const known = (w) => !!idx && (w in idx.terms || w in idx.titleterms);
  const han = /\p{Script=Han}/u;
  const out = [];
  const parts = query
    .split(/[^\p{Letter}\p{Number}_\p{Emoji_Presentation}]+/gu)
    .filter((t) => t);
  for (const part of parts) {
    for (const run of part.match(/\p{Script=Han}+|[^\p{Script=Han}]+/gu)) {
      if (!han.test(run) || known(run)) { out.push(run); continue; }
      let i = 0;
      while (i < run.length) {
        let j = Math.min(run.length, i + 8);
        while (j > i + 1 && !known(run.slice(i, j))) j--;
        const word = run.slice(i, j);
        if (word.length > 1 || known(word)) out.push(word);
        i = j;
      }
    }
  }
  return out.length ? out : parts;
}
"""


class SearchChineseQuery(SearchChinese):
    """Sphinx's Chinese search, its query split into the index's words."""
    js_splitter_code = SPLIT_QUERY


def setup(app):
    app.add_search_language(SearchChineseQuery)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
