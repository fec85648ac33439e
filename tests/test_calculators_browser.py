"""The book's in-page calculators, in a real browser, equal the command line.

Serves the built site (``_build/html``, built by ``make test`` before the
tests; built here if missing) on 127.0.0.1 with ``make serve``'s server
(``scripts/serve_book.py``), opens each chapter with a calculator in
headless Debian Chromium (Playwright's Python package), types a few inputs
and compares what the page shows with ``python -m labkit COMMAND <the
page's inputs> --json``: the table (``calc_core.rows``: human units), the
verdict sentence and the chart (``calc_view``), redrawn after each change.
Any request to a host other than 127.0.0.1 fails the test: Pyodide and
labkit.predict must come from the site itself. The Chinese edition's pages
(``zh/``) run the same calculators.js and labkit.predict, with the words
around them in Chinese (``calc_core.LABELS``, ``calc_view.WORDS``): each is
driven the same way. Opened from disk (``file://``), where Chromium refuses
Pyodide's import and fetches, every calculator says in one sentence how to
open it over HTTP, keeps the worked example, and throws nothing.

Without Chromium (``make setup`` installs Debian's ``chromium`` where it is
root with apt) the test is skipped, with the reason; on CI (CI=true) it
fails instead.

    .venv/bin/python -m pytest tests/test_calculators_browser.py -q
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
sys.path.insert(0, str(ROOT / "book" / "_ext"))
sys.path.insert(0, str(ROOT / "scripts"))
import calc_core  # noqa: E402
import calc_view  # noqa: E402
import serve_book  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
        "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
LOAD_MS = 120_000  # Pyodide starting on a busy 2-core machine

# page -> calculator -> inputs typed one case after the other (cumulative)
CASES = {
    "book/01_memory.html": ("memory", [
        {"--params": "7e9", "--gpus": "16", "--stage": "2"},
        {"--offload": "optimizer", "--precision": "fp32"},
        {"--params": "abc"},  # an error, as on the command line
        {"--preset": "llama3-8b"},  # the model picker: --params turns off
    ]),
    "book/03_sharding.html": ("comm", [
        {"--params": "13e9", "--gpus": "32", "--strategy": "ddp"},
        {"--strategy": "hybrid_shard", "--tokens-per-gpu": "8192"},
    ]),
    "book/05_tensor_parallel.html": ("flops", [
        {"--gpus": "512", "--tflops-per-gpu": "150"},
        {"--recompute": "none", "--peak": "h100", "--tied": False},
        {"--preset": "llama3.1-405b"},  # the model picker: the shape off
    ]),
    "book/06_pipeline_parallel.html": ("pipeline", [
        {"--schedule": "gpipe", "--microbatches": "16"},
        {"--schedule": "interleaved", "--chunks": "2", "--stages": "3"},
    ]),
}
# the Chinese twins (the model picker, an error, each chart): each zh page
# costs a Pyodide start (about 20 s on 2 busy cores)
for _path in list(CASES):
    CASES["zh/" + _path] = CASES[_path]
# the calculators that draw a chart of their result (calc_view.chart; flops
# has none: its result is one iteration's figures)
CHARTS = {"memory": "svg.calc-chart rect[data-part]",
          "comm": "svg.calc-chart rect[data-part]",
          "pipeline": "svg.calc-plot rect"}

READ_TABLE = """box => {
  const t = box.querySelector('.calc-result > table.calc-table');
  if (!t) return [];
  return [...t.tBodies[0].rows].map(tr => {
    const td = tr.querySelector(':scope > td');
    const st = td.querySelector('table');
    if (!st) return {key: tr.querySelector(':scope > th').textContent,
                     value: td.textContent};
    return {key: tr.querySelector(':scope > th').textContent,
            columns: [...st.tHead.rows[0].cells].map(c => c.textContent),
            cells: [...st.tBodies[0].rows].map(
              r => [...r.cells].map(c => c.textContent))};
  });
}"""


def _chromium() -> str:
    if Path(CHROMIUM).exists():
        return CHROMIUM
    why = ("no Chromium at /usr/bin/chromium: `make setup` installs Debian's "
           "`chromium` when run as root with apt (apt-get install chromium)")
    if os.environ.get("CI") == "true":
        pytest.fail(why + "; on CI this test must run")
    pytest.skip(why)


def _site() -> Path:
    if not (HTML / "index.html").exists():
        if os.environ.get("LABKIT_BOOK_BUILT"):
            pytest.fail("make test built the book, but _build/html is missing")
        subprocess.run([sys.executable, str(ROOT / "scripts" / "build_book.py"),
                        "--strict"], check=True, cwd=ROOT)
    return HTML


@pytest.fixture(scope="module")
def site():
    srv = serve_book.server(_site(), 0)   # make serve's server, any port
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/"
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def browser():
    """One browser context for every page, its HTTP cache on (Pyodide's files
    are cached across pages, as for a reader). Every request but those to
    127.0.0.1 goes to a proxy that does not exist (blocked); each is kept
    in ``outside``, every request in ``seen``."""
    exe = _chromium()
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=ARGS, proxy={
            "server": "http://127.0.0.1:9", "bypass": "127.0.0.1"})
        ctx = b.new_context()
        ctx.outside, ctx.seen = [], []

        def record(request):
            ctx.seen.append(request.url)
            if urlsplit(request.url).hostname != "127.0.0.1":
                ctx.outside.append(request.url)

        ctx.on("request", record)
        yield ctx
        ctx.close()
        b.close()


def cli(name: str, argv: list[str]) -> tuple[int, dict | None, str]:
    r = subprocess.run([sys.executable, "-m", "labkit", name, *argv, "--json"],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    return r.returncode, json.loads(r.stdout) if r.returncode == 0 else None, \
        r.stderr


def fill(page, box, values: dict) -> None:
    for flag, v in values.items():
        el = box.locator(f'[data-flag="{flag}"]')
        tag = el.evaluate("e => e.tagName + ':' + e.type")
        if tag.startswith("SELECT"):
            el.select_option(str(v))
        elif tag.endswith("checkbox"):
            el.set_checked(bool(v))
        else:
            el.fill(str(v))


def wait_for(page, box, values: dict) -> list[str]:
    """The page's argv once it has computed with all of ``values``."""
    want = [[f, str(v)] for f, v in values.items() if not isinstance(v, bool)]
    flags = [f for f, v in values.items() if v is True]
    off = [f for f, v in values.items() if v is False]
    page.wait_for_function(
        """([box, want, flags, off]) => {
          if (!box.dataset.argv || !['ready', 'error'].includes(
                box.dataset.state)) return false;
          const a = JSON.parse(box.dataset.argv);
          const has = (f, v) => a.some((x, i) => x === f && a[i + 1] === v);
          return want.every(([f, v]) => has(f, v)) &&
                 flags.every(f => a.includes(f)) &&
                 off.every(f => !a.includes(f));
        }""", arg=[box.element_handle(), want, flags, off], timeout=LOAD_MS)
    return json.loads(box.get_attribute("data-argv"))


@pytest.mark.parametrize("path", sorted(CASES))
def test_page_equals_command_line(site, browser, path):
    name, cases = CASES[path]
    if path.startswith("zh/") and not (HTML / "zh" / "index.html").exists():
        pytest.skip("no Chinese edition in this build "
                    "(build_book.py --english-only)")
    lang = "zh" if path.startswith("zh/") else "en"
    say = calc_core.LABELS[lang]
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))  # uncaught

    try:
        page.goto(site + path)
        box = page.locator(f'.labkit-calculator[data-calculator="{name}"]')
        assert box.count() == 1, f"no {name} calculator on {path}"
        static = box.evaluate(READ_TABLE)  # the worked example, built
        static_verdict = box.locator(".calc-verdict").text_content()
        assert box.locator(".calc-command").text_content().startswith(
            say["worked"])
        first = wait_for(page, box, {})
        assert box.get_attribute("data-state") == "ready", \
            box.locator(".calc-status").text_content()
        assert box.locator(".calc-status").text_content().startswith(
            say["computed"])
        rc, out, _ = cli(name, first)
        assert box.evaluate(READ_TABLE) == static == calc_core.rows(out, lang)
        assert box.locator(".calc-verdict").text_content() == \
            static_verdict == calc_view.verdict(name, out, lang) != ""
        drawn = box.locator(".calc-result").inner_html()
        for values in cases:
            fill(page, box, values)
            argv = wait_for(page, box, values)
            if values.get("--preset"):   # the picker: no shape flag sent
                assert not set(argv) & {"--params", "--layers", "--hidden",
                                        "--heads", "--vocab", "--tied"}
                assert box.locator('[data-shape]').first.is_disabled()
            rc, out, err = cli(name, argv)
            if rc == 0:
                assert box.get_attribute("data-state") == "ready", \
                    box.locator(".calc-status").text_content()
                assert box.evaluate(READ_TABLE) == calc_core.rows(out, lang), \
                    argv
                assert box.locator(".calc-verdict").text_content() == \
                    calc_view.verdict(name, out, lang) != "", argv
                if name in CHARTS:
                    assert box.locator(CHARTS[name]).count() > 0, argv
                now = box.locator(".calc-result").inner_html()
                assert now != drawn, f"not redrawn after {values}"
                drawn = now
                if name == "pipeline":
                    legend = say["plot"].partition("{")[0]
                    assert legend in box.locator("svg.calc-plot").text_content()
            else:
                assert rc == 2 and box.get_attribute("data-state") == "error"
                msg = box.locator(".calc-status").text_content()
                assert msg.startswith(say["error"]), msg
                assert msg.removeprefix(say["error"]) in err, (msg, err)
    finally:
        page.close()
    assert not browser.outside, f"requests to other hosts: {browser.outside}"
    assert site + "_static/calculators/pyodide/pyodide.asm.wasm" in browser.seen
    # sphinx-thebe's script declares a constant twice (a theme bug, harmless)
    assert not [e for e in errors if "THEBE" not in e], errors


@pytest.mark.parametrize("path", sorted(CASES))
def test_from_disk_each_calculator_says_how_to_open_it(browser, path):
    """``file://``: no TypeError, one sentence naming ``make serve`` and
    this page's address under it; the worked example (verdict, chart,
    table) is still there, the form hidden."""
    name = CASES[path][0]
    html = _site() / path
    if not html.exists():
        pytest.skip(f"{path} not built (build_book.py --english-only)")
    lang = "zh" if path.startswith("zh/") else "en"
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(html.as_uri())
        box = page.locator(f'.labkit-calculator[data-calculator="{name}"]')
        page.wait_for_function("b => b.dataset.state === 'file'",
                               arg=box.element_handle(), timeout=30_000)
        said = box.locator(".calc-status").text_content()
        url = f"http://127.0.0.1:8000/{path}"
        assert said == calc_core.LABELS[lang]["file"].format(url=url)
        assert "make serve" in said and "Error" not in said
        assert box.locator(".calc-form").is_hidden()
        assert box.locator(".calc-verdict").text_content().strip()
        if name in CHARTS:
            assert box.locator(CHARTS[name]).count() > 0
        assert box.evaluate(READ_TABLE)
    finally:
        page.close()
    # sphinx-thebe declares a constant twice (a theme bug, harmless)
    assert not [e for e in errors if "THEBE" not in e], errors


def test_serve_prints_its_address_and_serves_wasm(tmp_path):
    """``make serve``'s server: the address it prints, Pyodide's types."""
    (tmp_path / "index.html").write_text("<p>book</p>")
    (tmp_path / "x.wasm").write_bytes(b"\0asm")
    srv = serve_book.server(tmp_path, 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        import urllib.request
        base = f"http://127.0.0.1:{srv.server_address[1]}/"
        with urllib.request.urlopen(base + "x.wasm", timeout=10) as r:
            assert r.headers["Content-Type"] == "application/wasm"
        with urllib.request.urlopen(base, timeout=10) as r:
            assert b"book" in r.read()
    finally:
        srv.shutdown()
        srv.server_close()
    r = subprocess.run([sys.executable, str(ROOT / "scripts" /
                                            "serve_book.py"),
                        "--dir", str(tmp_path / "none")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "make book" in r.stderr
    import calculators   # the address a file:// page names is make serve's
    port = serve_book.DEFAULT_PORT
    assert calculators.SERVED == f"http://127.0.0.1:{port}/"


def test_other_hosts_are_blocked_and_caught(site, browser):
    """The guard itself: a request to another host fails and is recorded."""
    page = browser.new_page()
    try:
        page.goto(site + "book/intro.html")
        ok = page.evaluate("""() => fetch('http://example.invalid/x')
            .then(() => true, () => false)""")
    finally:
        page.close()
    assert not ok
    assert "http://example.invalid/x" in browser.outside
    browser.outside.remove("http://example.invalid/x")


def test_the_plot_speaks_the_pages_language():
    """The pipeline's timeline (built into the page, and redrawn by the
    browser through ``page_result(..., lang)``) in each edition's words."""
    argv = ["--schedule", "1f1b", "--stages", "4", "--microbatches", "8"]
    for lang in ("en", "zh"):
        out = json.loads(calc_core.page_result("pipeline", json.dumps(argv),
                                               lang))
        assert out["svg"] == calc_core.svg("pipeline", argv, lang)
        say = calc_core.LABELS[lang]
        assert say["plot"].partition("{")[0] in out["svg"]
        assert say["title"].partition("{")[2].partition("}")[2][:4] \
            in out["svg"]
    assert "时间" in calc_core.svg("pipeline", argv, "zh")
