"""Sphinx extension: a link on every page to the same page in the other
edition (English at the site's root, Chinese under ``zh/``).

    sphinx: config: lang_switch: zh    # English build: link to zh/<page>
    sphinx: config: lang_switch: en    # Chinese build, placed in zh/

Off (no link) when ``lang_switch`` is empty, as in a build of the English
edition alone, so that no page links a Chinese page that was not built.
``scripts/book_zh.py`` sets it for both builds, and ``lang_switch_skip``
to the pages that only one edition has. The link is relative
(``../zh/book/01_memory.html`` from ``book/01_memory.html``), so the site
works from a folder or any host, offline; each page also declares its
other-language twin (``<link rel="alternate" hreflang=...>``).
"""
from __future__ import annotations

import html

EDITIONS = {   # code -> (folder under the site's root, hreflang, label)
    "en": ("", "en", "English"),
    "zh": ("zh/", "zh-CN", "中文"),
}


def other_url(pagename: str, here: str, other: str) -> str:
    """The relative URL of ``pagename`` in edition ``other``, from the
    page ``pagename`` of edition ``here``."""
    up = "../" * (pagename.count("/") + EDITIONS[here][0].count("/"))
    return f"{up}{EDITIONS[other][0]}{pagename}.html"


def switch_html(pagename: str, here: str, other: str) -> str:
    _, lang, label = EDITIONS[other]
    url = html.escape(other_url(pagename, here, other))
    return (f'<p class="lang-switch" style="text-align: right">'
            f'<a href="{url}" hreflang="{lang}" '
            f'lang="{lang}">{label}</a></p>\n')


def setup(app):
    app.add_config_value("lang_switch", "", "html", types=[str])
    # pages of this edition alone (the Chinese glossary): no twin to link
    app.add_config_value("lang_switch_skip", [], "html", types=[list])

    def add_switch(app, pagename, templatename, context, doctree):
        other = app.config.lang_switch
        if (not other or doctree is None    # search, genindex: no twin
                or pagename in app.config.lang_switch_skip):
            return
        here = "en" if other == "zh" else "zh"
        context["body"] = switch_html(pagename, here, other) + \
            context.get("body", "")
        context["metatags"] = context.get("metatags", "") + (
            f'\n<link rel="alternate" hreflang="{EDITIONS[other][1]}" '
            f'href="{html.escape(other_url(pagename, here, other))}" />')

    def checked(app, config):
        if config.lang_switch and config.lang_switch not in EDITIONS:
            raise ValueError(f"lang_switch: {config.lang_switch!r} is not "
                             f"one of {sorted(EDITIONS)}")

    app.connect("config-inited", checked)
    app.connect("html-page-context", add_switch)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
