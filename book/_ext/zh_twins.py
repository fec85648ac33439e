"""Sphinx extension: a chapter's tables and figures, and the words inside
its formulas, in Chinese on the Chinese pages.

Tables and figures: every one a chapter shows carries a Chinese twin
(``labkit.twins``, loaded into each chapter's kernel by the build) under
``MIME``. The Chinese build puts that type first
(``nb_mime_priority_overrides`` in ``locale/zh_CN/config.yml``), so
MyST-NB hands it to :class:`TwinRenderer`, which draws the table's HTML
or the figure's SVG; the English build never picks it. A phrase the twin
could not put in Chinese is a warning naming it and the file to add it
to (``locale/zh_CN/generated.po``): ``--strict`` fails.

Formulas: ``\\text{...}`` in a formula (inline or displayed) is not a
message of the page's catalog; in the Chinese build :func:`math_text`
puts its words in Chinese from the same ``generated.po`` (an entry
without Chinese is a warning too); a subscript's or superscript's name
(``T_\\text{comm}``) is a symbol and stays. Inert in an English build.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MIME = "application/vnd.labkit.zh-twin+json"   # labkit.twins.MIME
GENERATED = "locale/zh_CN/generated.po"
TEXT = re.compile(r"\\text\{([^{}]*)\}")


def _is_zh(config) -> bool:
    return (config.language or "").lower().startswith("zh")


def _say(phrase: str) -> str:
    return f"no Chinese for {phrase!r}: add it to {GENERATED}"


class TwinRenderer:
    """MyST-NB's ``MimeRenderPlugin`` for ``MIME``. Under Sphinx, MyST-NB
    renders every type of an output and keeps one later (the build's
    priority names ``MIME`` first only in the Chinese build); the English
    build gets nothing from it, so it neither writes the SVG nor warns."""

    @staticmethod
    def handle_mime(renderer, data, inline):
        if data.mime_type != MIME:
            return None
        env = getattr(renderer.renderer, "sphinx_env", None)
        if env is None or not _is_zh(env.config):
            return []     # MyST-NB renders every type, then picks one
        twin = data.content
        if isinstance(twin, str):
            import json
            twin = json.loads(twin)
        for phrase in twin.get("missing", []):
            renderer.logger.warning(_say(phrase), subtype="zh_twin",
                                    line=data.line)
        if twin["kind"] == "svg":
            from myst_nb.core.render import MimeData
            svg = MimeData("image/svg+xml", twin["svg"],
                           cell_metadata=data.cell_metadata,
                           output_metadata=data.output_metadata,
                           cell_index=data.cell_index,
                           output_index=data.output_index, line=data.line)
            return (renderer.render_image_inline(svg) if inline
                    else renderer.render_image(svg))
        from docutils import nodes
        node = nodes.raw("", twin["html"], format="html")
        node["classes"] += ["output", "text_html", "zh-twin"]
        return [node]


def math_text(latex: str) -> tuple[str, list[str]]:
    """``latex`` with the words of each ``\\text{...}`` in Chinese, and
    the ones without Chinese."""
    from labkit.twins import translate
    missing = []

    def one(m):
        if re.search(r"[_^]\{?\s*$", latex[:m.start()]):
            return m.group(0)      # a subscript's name: a symbol
        cn, miss = translate(m.group(1))
        if miss:
            missing.append(miss)
        return r"\text{" + cn + "}"
    return TEXT.sub(one, latex), missing


def _doctree_read(app, doctree):
    if not _is_zh(app.config):
        return
    from docutils import nodes
    from sphinx.util import logging
    log = logging.getLogger(__name__)
    for node in doctree.findall(lambda n: isinstance(
            n, (nodes.math, nodes.math_block))):
        latex = node.astext()
        if r"\text{" not in latex:
            continue
        cn, missing = math_text(latex)
        for phrase in missing:
            log.warning(_say(phrase), location=node)
        if cn != latex:
            node.children = [nodes.Text(cn)]


def setup(app):
    from myst_nb.core.render import load_mime_renders
    plugins = load_mime_renders()
    if TwinRenderer not in plugins:
        plugins.append(TwinRenderer)
    app.connect("doctree-read", _doctree_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
