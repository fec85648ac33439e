"""Sphinx extension: what the published site needs beyond the theme.

- Launch buttons (Colab, Binder) only on the lab pages, and only when
  ``_config.yml``'s ``repository: url`` is set (the deploy workflow fills it;
  a local build shows none rather than a made-up address). A chapter is a
  MyST text file that Colab cannot open.
- The sitemap (``sphinx-sitemap``) only when the published URL
  (``html: baseurl`` in _config.yml) is known: without one it has nothing
  to write; the same URL makes the social previews' ``og:url`` absolute.
"""
from __future__ import annotations

LAB_PAGES = "labs/"


def _baseurl(config) -> str:
    """html_baseurl before the config is initialised (Jupyter Book passes
    _config.yml's ``html: baseurl`` as an override)."""
    return (config.overrides.get("html_baseurl")
            or config._raw_config.get("html_baseurl") or "")


def setup(app):
    if _baseurl(app.config):
        app.setup_extension("sphinx_sitemap")

    def no_repository_no_buttons(app, config):
        opts = config.html_theme_options
        if not opts.get("repository_url"):
            opts["launch_buttons"] = {}
        if config.html_baseurl and not getattr(config, "ogp_site_url", None):
            config.ogp_site_url = config.html_baseurl  # absolute og:url
        if "sitemap_url_scheme" in config:
            config.sitemap_url_scheme = "{link}"  # one language, no versions

    def launch_buttons_on_labs_only(app, pagename, templatename, context,
                                    doctree):
        if pagename.startswith(LAB_PAGES):
            return
        context["header_buttons"] = [
            b for b in context.get("header_buttons", [])
            if b.get("label") != "launch-buttons"]

    app.connect("config-inited", no_repository_no_buttons)
    app.connect("html-page-context", launch_buttons_on_labs_only, priority=502)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
