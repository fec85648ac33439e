"""Sphinx extension: calculators that run in the reader's browser.

A chapter writes, next to the formula it computes::

    ```{calculator} memory
    :fields: params gpus gpu-mem stage offload
    --params 70e9 --gpus 8 --gpu-mem 80 --stage 3
    ```

The argument is a command of ``python -m labkit`` (``labkit.__main__``'s
``COMMANDS``; a new command there is a new calculator, nothing to add here,
provided its module lives in ``labkit.predict``: pure Python, the only
package the browser gets) and the content its prefilled command line. The build renders the worked
example as a static table (readable without JavaScript) and a form of the
command's options (``:fields:`` shows those, the rest keep their prefilled
values). In the browser, ``calculators.js`` loads Pyodide from the site's own
``_static/calculators/pyodide/`` (the pinned npm package, no CDN) and the
files of ``labkit.predict`` plus ``calc_core.py``, and recomputes on every
change with the same code as ``python -m labkit COMMAND ... --json``.

Pyodide is fetched once into ``.cache/pyodide/`` (``make setup`` runs it;
it needs npm)::

    python book/_ext/calculators.py fetch
"""
from __future__ import annotations

import html
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import calc_core
import calc_help
import calc_view

PYODIDE_VERSION = "314.0.6"
# The files of the npm package a page needs (no console, maps or typings).
PYODIDE_FILES = ["pyodide.js", "pyodide.mjs", "pyodide.asm.mjs",
                 "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json",
                 "package.json"]
HERE = Path(__file__).resolve().parent
STATIC = "calculators"  # under the site's _static/
# where `make serve` (scripts/serve_book.py) shows the book: a page opened
# from disk names it (a file:// page cannot run the calculators)
SERVED = "http://127.0.0.1:8000/"


def checkout() -> Path:
    """The repository root: where ``labkit`` is imported from."""
    import labkit
    return Path(labkit.__file__).resolve().parent.parent


def pyodide_dir() -> Path:
    return Path(os.environ.get("LABKIT_PYODIDE_DIR") or
                checkout() / ".cache" / "pyodide" / PYODIDE_VERSION)


def fetch(dest: Path | None = None) -> Path:
    """``npm pack pyodide@VERSION`` into ``dest`` (kept once fetched)."""
    dest = dest or pyodide_dir()
    if all((dest / f).exists() for f in PYODIDE_FILES):
        return dest
    npm = shutil.which("npm")
    if not npm:
        raise SystemExit("the in-page calculators need Pyodide from the npm "
                         "registry, but `npm` is not installed: install "
                         "Node.js/npm (e.g. apt-get install npm) and rerun "
                         "`make setup`")
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    r = subprocess.run([npm, "pack", f"pyodide@{PYODIDE_VERSION}", "--silent"],
                       cwd=tmp, capture_output=True, text=True, timeout=600)
    tgz = tmp / f"pyodide-{PYODIDE_VERSION}.tgz"
    if r.returncode or not tgz.exists():
        raise SystemExit(f"`npm pack pyodide@{PYODIDE_VERSION}` failed "
                         f"(exit {r.returncode}): {r.stderr.strip()[-500:]}")
    with tarfile.open(tgz) as t:
        for f in PYODIDE_FILES:
            data = t.extractfile(f"package/{f}").read()
            (tmp / f).write_bytes(data)
    tgz.unlink()
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def python_zip() -> bytes:
    """``labkit/{__init__,__main__,cli_rules,disk}.py``,
    ``labkit/predict/*.py``, ``calc_core.py`` and ``calc_view.py``
    (units, verdict, charts): everything the browser
    imports (cli_rules: the command line's checks of every value)."""
    root = checkout()
    files = [*(root / "labkit" / f for f in ("__init__.py", "__main__.py",
                                             "cli_rules.py", "disk.py")),
             *sorted((root / "labkit" / "predict").rglob("*.py"))]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for f in files:
            z.write(f, f.relative_to(root).as_posix())
        for f in ("calc_core.py", "calc_view.py"):
            z.write(HERE / f, f)
    return buf.getvalue()


# -- the directive --------------------------------------------------------------

def table_html(rows: list[dict]) -> str:
    """The result table (calculators.js builds the same from the same rows)."""
    out = ['<table class="calc-table"><tbody>']
    for r in rows:
        k = html.escape(r["key"])
        if "columns" in r:
            head = "".join(f"<th>{html.escape(c)}</th>" for c in r["columns"])
            body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>"
                                            for c in row) + "</tr>"
                           for row in r["cells"])
            cell = (f'<table class="calc-subtable"><thead><tr>{head}</tr>'
                    f"</thead><tbody>{body}</tbody></table>")
        else:
            cell = html.escape(r["value"])
        out.append(f"<tr><th>{k}</th><td>{cell}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def field_html(f: dict, shown: bool, lang: str = "en") -> str:
    attrs = (f'data-flag="{html.escape(f["flag"])}" '
             f'name="{html.escape(f["dest"])}"'
             + (" data-model" if f.get("model") else "")
             + (" data-shape" if f.get("shape") else ""))
    if not shown:
        if f["kind"] == "check":
            return (f'<input type="checkbox" hidden {attrs}'
                    f'{" checked" if f["value"] else ""}>')
        return f'<input type="hidden" {attrs} value="{html.escape(f["value"])}">'
    if f["kind"] == "choice":
        opts = ([""] if not f["required"] and f["value"] == "" else [])
        opts += f["choices"]
        inner = "".join(
            f'<option value="{html.escape(str(c))}"'
            f'{" selected" if str(c) == f["value"] else ""}>'
            f'{html.escape(str(c)) or "-"}</option>' for c in opts)
        ctl = f"<select {attrs}>{inner}</select>"
    elif f["kind"] == "check":
        ctl = (f'<input type="checkbox" {attrs}'
               f'{" checked" if f["value"] else ""}>')
    else:
        mode = ' inputmode="decimal"' if f["kind"] == "number" else ""
        ctl = (f'<input type="text" size="10"{mode} {attrs} '
               f'value="{html.escape(f["value"])}">')
    tip = calc_help.help_text(f["help"], lang)
    tip = f' title="{html.escape(tip)}"' if tip else ""
    return f'<label{tip}><span>{html.escape(f["flag"])}</span> {ctl}</label>'


def calculator_html(name: str, argv: list[str], shown: list[str] | None,
                    lang: str = "en") -> str:
    """The calculator's box: the worked example (static), its form (the
    options' tooltips: ``calc_help.HELP``), and the words the browser
    shows, all in the page's ``lang`` (a key of ``calc_core.LABELS``; the
    same calculators.js for every edition)."""
    say = calc_core.LABELS[lang]
    fields = calc_core.fields(name, argv)
    result = calc_core.run(name, argv)
    if "error" in result:
        raise ValueError(f"calculator {name} {shlex.join(argv)}: "
                         f"{result['error']}")
    show = {s.lstrip("-").replace("-", "_") for s in shown} if shown else None
    # the model picker is on every calculator whose command has one
    try:
        form = "".join(field_html(f, show is None or f["dest"] in show
                                  or f.get("model", False), lang)
                       for f in fields)
    except KeyError as e:
        raise ValueError(e.args[0]) from None
    cmd = html.escape(shlex.join(["python", "-m", "labkit", name, *argv]))
    return (
        f'<div class="labkit-calculator" data-calculator="{html.escape(name)}"'
        f' data-lang="{lang}" data-serve="{SERVED}"'
        f' data-labels="{html.escape(json.dumps(say))}">'
        f'<p class="calc-command">{html.escape(say["worked"])} '
        f'<code>{cmd}</code></p>'
        f'<form class="calc-form" hidden onsubmit="return false">{form}</form>'
        '<p class="calc-status" hidden aria-live="polite"></p>'
        '<div class="calc-result"><p class="calc-verdict">'
        f'{html.escape(calc_view.verdict(name, result, lang))}</p>'
        f'{calc_core.svg(name, argv, lang)}'
        f'{table_html(calc_core.rows(result, lang))}</div></div>')


def setup(app):
    from docutils import nodes
    from docutils.parsers.rst import Directive, directives
    from sphinx.errors import ExtensionError

    class Calculator(Directive):
        required_arguments = 1
        has_content = True
        option_spec = {"fields": directives.unchanged}

        def run(self):
            name = self.arguments[0]
            argv = shlex.split(" ".join(self.content))
            shown = self.options.get("fields", "").split() or None
            lang = calc_core.lang_of(
                self.state.document.settings.env.config.language)
            try:
                text = calculator_html(name, argv, shown, lang)
            except ValueError as e:
                raise self.error(str(e))
            return [nodes.raw("", text, format="html")]

    def inited(app):
        if app.builder.format == "html":
            missing = [f for f in PYODIDE_FILES
                       if not (pyodide_dir() / f).exists()]
            if missing:
                raise ExtensionError(
                    f"Pyodide {PYODIDE_VERSION} is missing from {pyodide_dir()}"
                    f" ({', '.join(missing)}): run `make setup` (it fetches it "
                    "with npm; `python book/_ext/calculators.py fetch`)")

    def finished(app, exc):
        if exc or app.builder.format != "html":
            return
        out = Path(app.outdir) / "_static" / STATIC
        shutil.rmtree(out, ignore_errors=True)
        (out / "pyodide").mkdir(parents=True)
        for f in PYODIDE_FILES:
            shutil.copy2(pyodide_dir() / f, out / "pyodide" / f)
        (out / "labkit-predict.zip").write_bytes(python_zip())
        for f in ("calculators.js", "calculators.css"):
            shutil.copy2(HERE / f, out / f)

    app.add_directive("calculator", Calculator)
    app.add_js_file(f"{STATIC}/calculators.js", defer="defer")
    app.add_css_file(f"{STATIC}/calculators.css")
    app.connect("builder-inited", inited)
    app.connect("build-finished", finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    if sys.argv[1:] != ["fetch"]:
        raise SystemExit(__doc__)
    print(f"pyodide {PYODIDE_VERSION}: {fetch()}")
