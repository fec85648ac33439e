"""The built book loads nothing from another host (math included).

Runs after the book is built (``make test`` builds it first and sets
LABKIT_BOOK_BUILT=1); skipped when no build is there and nobody asked for it.
Links (<a href>) to other sites are fine; what a browser *loads* is not:
scripts, style sheets, images, fonts, frames, CSS url()/@import, and in
JavaScript (the calculators' Pyodide included) import(), fetch(), workers
and script sources. The in-page calculators' Pyodide (js, wasm, stdlib) is
served from the build; tests/test_calculators_browser.py also blocks and
fails on any request to another host while the calculators run. Both
editions are checked: every file under ``_build/html`` (the Chinese one,
``_build/html/zh``, included), and the per-edition checks below on each
edition that was built.
"""
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
REMOTE = r"(?:https?:)?//"
PATTERNS = [
    re.compile(rf"<script[^>]*\ssrc=[\"']{REMOTE}", re.I),
    re.compile(rf"<link[^>]*\shref=[\"']{REMOTE}[^>]*>", re.I),
    re.compile(rf"<(?:img|iframe|source|video|audio|embed)[^>]*\ssrc=[\"']{REMOTE}", re.I),
    re.compile(rf"url\(\s*[\"']?{REMOTE}", re.I),
    re.compile(rf"@import\s+(?:url\()?\s*[\"']?{REMOTE}", re.I),
]
JS_LOADS = re.compile(
    rf"(?:\bimport\(|importScripts\(|\bfetch\(|\.src\s*=|loadScript\(|"
    rf"new\s+(?:Shared)?Worker\()\s*[\"'`]{REMOTE}")
PYODIDE = ["pyodide.js", "pyodide.asm.mjs", "pyodide.asm.wasm",
           "python_stdlib.zip", "pyodide-lock.json"]


def _built() -> bool:
    if (HTML / "index.html").exists():
        return True
    if os.environ.get("LABKIT_BOOK_BUILT"):
        pytest.fail("make test built the book, but _build/html is missing")
    pytest.skip("book not built: run `make book` or `make test`")


def editions() -> list[Path]:
    """The site's root of each edition built: English, then Chinese
    (``zh/``) when it is there; an English page that links its Chinese
    twin (``lang-switch``) means the Chinese edition must be there."""
    _built()
    sites = [HTML] + ([HTML / "zh"] if (HTML / "zh" / "index.html").exists()
                      else [])
    if len(sites) == 1:
        assert 'class="lang-switch"' not in (HTML / "index.html").read_text(), \
            "the English pages link a Chinese edition that was not built"
    return sites


def offending(text: str) -> list[str]:
    hits = []
    for pat in PATTERNS:
        for m in pat.finditer(text):
            # <link rel="canonical"/"alternate"> etc. load nothing
            if m.group(0).lower().startswith("<link") and not re.search(
                    r"rel=[\"'](?:stylesheet|preload|modulepreload|icon|"
                    r"shortcut icon)[\"']", m.group(0), re.I):
                continue
            hits.append(m.group(0)[:120])
    return hits


def test_patterns_catch_remote_loads():
    assert offending('<script src="https://cdn.example/x.js">')
    assert offending('<link rel="stylesheet" href="//fonts.example/x.css">')
    assert offending("body{background:url('https://x/y.png')}")
    assert not offending('<a href="https://www.mathjax.org">MathJax</a>')
    assert not offending('<script src="_static/mathjax/tex-chtml.js">')


def test_no_html_or_css_loads_from_another_host():
    _built()
    files = list(HTML.rglob("*.html")) + list(HTML.rglob("*.css"))
    assert files
    bad = {str(f.relative_to(HTML)): offending(f.read_text(errors="replace"))
           for f in files}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, bad


def test_js_patterns_catch_remote_loads():
    assert JS_LOADS.search('await import("https://cdn.example/pyodide.mjs")')
    assert JS_LOADS.search("fetch('//cdn.example/x.whl')")
    assert JS_LOADS.search('s.src = "https://cdn.example/x.js"')
    assert not JS_LOADS.search('fetch(base + "labkit-predict.zip")')


def test_no_script_loads_from_another_host():
    _built()
    files = [f for f in HTML.rglob("*") if f.suffix in (".js", ".mjs")]
    assert any(f.name == "calculators.js" for f in files)
    bad = {str(f.relative_to(HTML)): JS_LOADS.findall(f.read_text(
        errors="replace")) for f in files}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, bad


def test_pyodide_is_served_locally():
    """The calculators' Python runtime is part of the build: the wasm, the
    standard library and the loader, and the loader is told to take every
    file from there (its default for packages is a CDN)."""
    for site in editions():
        here = site / "_static" / "calculators"
        for name in PYODIDE:
            assert (here / "pyodide" / name).stat().st_size > 0, name
        assert (here / "labkit-predict.zip").exists()
        js = (here / "calculators.js").read_text()
        assert "https:" not in js and "http:" not in js
        for option in ("indexURL: dir", "packageBaseUrl: dir",
                       "lockFileURL: dir"):
            assert option in js, option
        page = (site / "book" / "01_memory.html").read_text()
        assert '_static/calculators/calculators.js"' in page


def test_math_is_served_locally():
    for site in editions():
        page = (site / "book" / "01_memory.html").read_text()
        m = re.search(r"<script[^>]*src=\"([^\"]*mathjax[^\"]*)\"", page,
                      re.I)
        assert m, "no MathJax script on the chapter with math"
        assert (site / "book" / m.group(1)).resolve().exists()


def test_figures_are_rendered():
    """Chapters draw their figures at build time; a non-inline matplotlib
    backend in the kernel's environment (MPLBACKEND=Agg) silently drops
    them, leaving "<Figure size ...>" text instead of a picture."""
    for site in editions():
        page = (site / "book" / "01_memory.html").read_text()
        assert "<img" in page and "&lt;Figure size" not in page, site
