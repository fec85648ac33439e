"""Sphinx extension: a lab's result tables, column titles in the page's
language.

``labkit.lab.Results.show`` displays, beside its HTML and text, the table
as data under ``labkit.lab.MIME`` (``application/vnd.labkit.results+json``:
``{"columns": [...], "rows": [[cell, ...]]}``, each cell the text the
notebook shows). This extension is a MyST-NB mime renderer for it
(MyST-NB's ``MimeRenderPlugin`` protocol), preferred to the HTML in the
HTML builders: it draws the same table with the column titles of
``TITLES`` in the build's language. The cells (quantities, strategies,
numbers, units, devices) are copied as they are: the English page shows
what it showed before, the Chinese page the same cells under Chinese
titles. A column that is not in ``TITLES`` (a lab's own key, e.g.
``recompute``) keeps its key: an identifier, as in code.

MyST-NB finds such renderers through an entry point of an installed
package; the book is not one, so :func:`setup` adds the renderer to the
list MyST-NB loaded (``load_mime_renders``, read on every output).
"""
from __future__ import annotations

import html
import json

MIME = "application/vnd.labkit.results+json"   # labkit.lab.MIME
HTML_BUILDERS = ("html", "dirhtml", "singlehtml", "readthedocs", "epub")
TITLES = {   # column -> title, per edition (labkit.lab.FIELDS and device)
    "en": {},
    "zh": {"quantity": "物理量", "strategy": "策略",
           "world_size": "进程数", "predicted": "预测值",
           "measured": "实测值", "ratio": "比值（实测/预测）",
           "unit": "单位", "device": "设备"},
}


def lang_of(language: str | None) -> str:
    """The TITLES key of a Sphinx ``language`` (``zh_CN`` -> ``zh``)."""
    return "zh" if (language or "").lower().startswith("zh") else "en"


def table_html(data: dict | str, lang: str = "en") -> str:
    """The result table: ``data``'s cells under ``lang``'s titles."""
    if isinstance(data, str):
        data = json.loads(data)
    titles = TITLES[lang]
    head = "".join(f'<th lang="{"en" if c not in titles else lang}">'
                   f"{html.escape(titles.get(c, c))}</th>"
                   for c in data["columns"])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>"
                                    for v in row) + "</tr>"
                   for row in data["rows"])
    return (f'<table class="table labkit-results"><thead><tr>{head}</tr>'
            f"</thead><tbody>{body}</tbody></table>")


class ResultsRenderer:
    """MyST-NB's ``MimeRenderPlugin``: ``MIME`` first in HTML builders."""

    mime_priority_overrides = [(b, MIME, 1) for b in HTML_BUILDERS]

    @staticmethod
    def handle_mime(renderer, data, inline):
        if inline or data.mime_type != MIME:
            return None
        from docutils import nodes
        env = getattr(renderer.renderer, "sphinx_env", None)
        lang = lang_of(env.config.language if env else None)
        node = nodes.raw("", table_html(data.content, lang), format="html")
        node["classes"] += ["output", "labkit-results"]
        return [node]


def register() -> None:
    """Add the renderer to MyST-NB's (cached) list, once."""
    from myst_nb.core.render import load_mime_renders
    plugins = load_mime_renders()
    if ResultsRenderer not in plugins:
        plugins.append(ResultsRenderer)


def setup(app):
    register()
    return {"parallel_read_safe": True, "parallel_write_safe": True}
