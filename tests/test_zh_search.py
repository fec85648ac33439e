"""The Chinese edition's search finds Chinese words in the right chapters.

Two levels, on the built Chinese edition (``_build/html/zh``; skipped
without it, failed when ``LABKIT_ZH_BUILT`` says there should be one):

- the index (``searchindex.js``) holds Chinese words, segmented by jieba
  at build time (``sphinx.search.zh``; ``html_search_language: zh``);
- the search page itself, in headless Chromium over HTTP (``make
  serve``'s server): 显存, 流水线气泡 and 张量并行 list their chapter. The query is split in the browser into the
  index's words (``book/_ext/zh_search.py``), as a reader types it.

    .venv/bin/python -m pytest tests/test_zh_search.py -q
"""
from __future__ import annotations

import json
import os
import re
import sys
import threading
from pathlib import Path
from urllib.parse import quote

import pytest

ROOT = Path(__file__).resolve().parent.parent
ZH = ROOT / "_build" / "html" / "zh"
sys.path.insert(0, str(ROOT / "scripts"))
import serve_book  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
# query -> the chapter it must find (its page, without .html)
QUERIES = {"显存": "book/01_memory",
           "流水线气泡": "book/06_pipeline_parallel",
           "张量并行": "book/05_tensor_parallel"}


def _index() -> dict:
    if not (ZH / "searchindex.js").exists():
        if os.environ.get("LABKIT_ZH_BUILT"):
            pytest.fail("the Chinese edition should be built, but "
                        "_build/html/zh/searchindex.js is missing")
        pytest.skip("no Chinese build: python scripts/build_book.py")
    text = (ZH / "searchindex.js").read_text()
    return json.loads(text[text.index("(") + 1:text.rindex(")")])


def _docs(index: dict, word: str) -> set[str]:
    hits = []
    for table in ("terms", "titleterms"):
        h = index[table].get(word, [])
        hits += [h] if isinstance(h, int) else h
    return {index["docnames"][i] for i in hits}


def test_the_index_holds_chinese_words():
    index = _index()
    han = [t for t in index["terms"] if re.search(r"[\u4e00-\u9fff]", t)]
    assert len(han) > 1000, f"only {len(han)} Chinese terms: is jieba in?"
    for query, chapter in QUERIES.items():
        # jieba's words of the query: every one in the chapter
        import jieba
        words = [w for w in jieba.cut(query) if len(w) > 1]
        assert words and all(chapter in _docs(index, w) for w in words), \
            (query, words)


def test_the_search_page_finds_each_chapter():
    _index()
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI") == "true":
            pytest.fail("no Chromium at /usr/bin/chromium")
        pytest.skip("no Chromium at /usr/bin/chromium (make setup)")
    from playwright.sync_api import sync_playwright
    srv = serve_book.server(ZH.parent, 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}/zh/"
    found = {}
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, args=[
                "--headless", "--no-sandbox", "--disable-gpu"])
            page = b.new_page()
            for query in QUERIES:
                page.goto(f"{base}search.html?q={quote(query)}")
                # Sphinx lists the results one by one, then says so in
                # the results' first paragraph
                page.wait_for_function(
                    "() => document.querySelector('#search-results p')"
                    "?.textContent.trim()", timeout=60_000)
                found[query] = page.eval_on_selector_all(
                    "#search-results li a",
                    "as => as.map(a => a.getAttribute('href'))")
            b.close()
    finally:
        srv.shutdown()
        srv.server_close()
    for query, chapter in QUERIES.items():
        top = [h.split("#")[0].split("?")[0].removesuffix(".html")
               for h in found[query]]
        assert chapter in top, (query, found[query])
