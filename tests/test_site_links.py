"""Every link of the built site to the site itself resolves.

Complements the strict build (``-W -n --keep-going``: cross-references):
this reads the HTML that was written and checks every relative ``href`` and
``src`` (file and ``#anchor``), plus the sitemap and social-preview metadata
configuration. Links to other sites are not followed (no network). The
Chinese edition (``_build/html/zh``) is part of the site: its pages, and
the language links between the two editions, are checked the same way.
"""
from __future__ import annotations

import os
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("id", "name"):
            if a.get(key):
                self.ids.add(a[key])
        for key in ("href", "src"):
            if a.get(key) and not (tag == "link" and a.get("rel") in (
                    "canonical", "alternate")):
                self.links.append(a[key])


def _built():
    if (HTML / "index.html").exists():
        return
    if os.environ.get("LABKIT_BOOK_BUILT"):
        pytest.fail("make test built the book, but _build/html is missing")
    pytest.skip("book not built: run `make book` or `make test`")


def broken_links(site: Path) -> list[str]:
    pages, bad = {}, []

    def page(p: Path) -> _Page:
        if p not in pages:
            pages[p] = _Page()
            pages[p].feed(p.read_text(errors="replace"))
        return pages[p]

    for f in sorted(site.rglob("*.html")):
        if "_static" in f.relative_to(site).parts[:2]:
            continue  # the themes' Jinja macros, copied as they are
        for link in page(f).links:
            u = urlsplit(link)
            if u.scheme or u.netloc or link.startswith(("mailto:", "data:",
                                                        "javascript:")):
                continue
            target = (f.parent / unquote(u.path)).resolve() if u.path else f
            if target.is_dir():
                target = target / "index.html"
            where = f"{f.relative_to(site)}: {link}"
            if not target.exists():
                bad.append(where)
            elif (u.fragment and target.suffix == ".html"
                  and unquote(u.fragment) not in page(target).ids):
                bad.append(where + " (no such anchor)")
    return bad


def test_checker_finds_broken_links(tmp_path):
    (tmp_path / "a.html").write_text(
        '<a href="b.html#x">b</a><a href="https://example.org/">x</a>'
        '<img src="missing.png"><a href="#top">t</a><p id="top">')
    (tmp_path / "b.html").write_text('<p id="y">')
    assert broken_links(tmp_path) == ["a.html: b.html#x (no such anchor)",
                                      "a.html: missing.png"]


def test_every_internal_link_resolves():
    _built()
    assert not broken_links(HTML)
    if (HTML / "zh" / "index.html").exists():   # both editions, linked
        en = (HTML / "book" / "01_memory.html").read_text()
        zh = (HTML / "zh" / "book" / "01_memory.html").read_text()
        assert 'href="../zh/book/01_memory.html"' in en
        assert 'href="../../book/01_memory.html"' in zh


def test_search_works_offline():
    _built()
    assert (HTML / "search.html").exists()
    index = (HTML / "searchindex.js").read_text()
    assert "memory" in index.lower()


def test_social_preview_metadata_and_sitemap_follow_the_published_url():
    """og: metadata on every page; the sitemap exists only when the deploy
    workflow gives the published URL (html_baseurl), never a made-up one."""
    _built()
    page = (HTML / "book" / "01_memory.html").read_text()
    assert re.search(r'<meta property="og:title" content="[^"]+"', page)
    assert 'og:site_name" content="Training at Scale"' in page
    config = (ROOT / "_config.yml").read_text()
    baseurl = re.search(r'^  baseurl: "([^"]*)"', config, re.M).group(1)
    assert (HTML / "sitemap.xml").exists() == bool(baseurl)
    if baseurl:
        locs = re.findall(r"<loc>([^<]+)</loc>",
                          (HTML / "sitemap.xml").read_text())
        assert locs and all(
            u.startswith(baseurl) and (HTML / u[len(baseurl):]).exists()
            for u in locs), locs[:3]


def test_launch_buttons_only_with_a_repository_and_only_on_labs():
    """No repository URL in _config.yml (a local build): no launch buttons,
    never a made-up address. With one (the deploy workflow), Colab and
    Binder buttons on the lab pages only (a chapter is a MyST text file)."""
    _built()
    config = (ROOT / "_config.yml").read_text()
    repo = re.search(r'^  url: "([^"]*)"', config, re.M).group(1)
    for f in HTML.rglob("*.html"):
        text = f.read_text(errors="replace")
        has = "colab.research.google.com" in text or "mybinder.org" in text
        parts = f.relative_to(HTML).parts
        on_lab = parts[parts[0] == "zh"] == "labs"   # zh/labs/ too
        assert has == bool(repo and on_lab), f.relative_to(HTML)
