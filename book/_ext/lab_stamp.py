"""Sphinx extension: a lab page's stamp, in the build's language.

``scripts/build_book.py`` (``add_stamp``) puts under each staged lab's
title where and with what it was measured, as data::

    ```{lab-stamp}
    {"commit": "abc", "date": "2026-11-30T12:00:00+00:00", ...}
    ```

(``labkit.results.provenance.record``; ``{}``: the lab was not run in this
build). This directive says it as a note with ``labkit.results.provenance.stamp``
in the page's language (``STAMP``, one table of phrases, English and
Chinese): the same staged notebook serves both editions, the record's
values (device, torch, date, commit) are the same in both, and no
catalog holds a stamp (a directive's content is not a message). On a
Chinese page of a lab that was run, one sentence more (``OUTPUTS``): the
printed output stays English, as the command line prints it, and the
result tables' titles are Chinese (``lab_results.py``).
"""
from __future__ import annotations

import json

# Said after the stamp of a lab that was run (its outputs are on the
# page), per edition: the labs' printed lines are the command line's.
OUTPUTS = {
    "en": "",
    "zh": "下面各代码单元的打印输出与命令行打印的一致，保持英文；"
          "结果表（labkit.lab.Results.show）的列名为中文，数值不变。",
}


def lang_of(language: str | None) -> str:
    """The ``labkit.results.provenance.STAMP`` key of a Sphinx ``language``."""
    return "zh" if (language or "").lower().startswith("zh") else "en"


def stamp_text(content: str, language: str | None) -> str:
    """The stamp of a record (the directive's JSON content) in
    ``language``; ValueError when the content is not a record."""
    from labkit.results.provenance import STAMPED, stamp
    try:
        rec = json.loads(content or "{}")
    except ValueError as e:
        raise ValueError(f"lab-stamp: not JSON ({e})") from None
    if not isinstance(rec, dict):
        raise ValueError("lab-stamp: not a provenance record (a JSON object)")
    missing = [k for k in STAMPED if rec and k not in rec]
    if missing:
        raise ValueError(f"lab-stamp: the record lacks {', '.join(missing)}")
    lang = lang_of(language)
    text = stamp(rec or None, rec.get("world_size"), lang)
    return f"{text}{OUTPUTS[lang]}" if rec else text


def directive():
    """The ``{lab-stamp}`` directive class (docutils)."""
    from docutils import nodes
    from docutils.parsers.rst import Directive

    class LabStamp(Directive):
        has_content = True

        def run(self):
            env = getattr(self.state.document.settings, "env", None)
            try:
                text = stamp_text("\n".join(self.content),
                                  env.config.language if env else None)
            except ValueError as e:
                raise self.error(str(e))
            para = nodes.paragraph(text, text, translatable=False)
            note = nodes.note("", para, classes=["lab-stamp"])
            note.source, note.line = \
                self.state_machine.get_source_and_line(self.lineno)
            return [note]

    return LabStamp


def setup(app):
    app.add_directive("lab-stamp", directive())
    return {"parallel_read_safe": True, "parallel_write_safe": True}
