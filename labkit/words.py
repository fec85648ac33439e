"""Glued words in both editions: the English phrase and its Chinese twin.

Most glued values are numbers, the same in both languages. A few are
words shown inside the prose ("fits", ``True``, "the same", "4.2
minutes"); the Chinese page must show them in Chinese, chosen by the same
code from the same computed value. A chapter glues such a value with
:func:`glue_words`: the English under ``key``, the Chinese under
``key__zh`` (:data:`ZH`), both from the one value::

    from labkit.words import glue_words
    glue_words(glue, "c13_ds_fits", "fits" if lay["fits"] else
               "does not fit")

The Chinese paragraph (``locale/zh_CN/LC_MESSAGES/<page>.po``) writes
``{glue:text}`c13_ds_fits__zh``` where the English writes
``{glue:text}`c13_ds_fits```; ``scripts/zh_catalogs.py check`` reads the
two as the same value, and fails where a Chinese paragraph shows the
English twin of a key the page glues with :func:`glue_words`.

:func:`zh` translates with :data:`PHRASES`: a phrase, or a template whose
``{}`` carries the computed part (a number, a file name) unchanged. A
phrase it lacks stops the build with one line naming it: add it here.
The chapter's ``glue`` is passed in (MyST-NB's, or a test's stand-in).
"""
from __future__ import annotations

import re

ZH = "__zh"    # suffix of the Chinese twin's glue key

# English phrase (or template, "{}" = the computed part) -> Chinese
PHRASES = {
    "True": "是",
    "False": "否",
    "fits": "放得下",
    "does not fit": "放不下",
    "the same": "相同",
    "{} breaks": "{} 处断点",
    "{} minutes": "{} 分钟",
    "none yet (this checkout has no `{}`)": "暂无（本仓库没有 `{}`）",
    # link names of labkit.predict.plan_moe: proper names in Chinese text
    "nvlink": "NVLink",
    "infiniband": "InfiniBand",
}


def _pattern(template: str) -> re.Pattern:
    parts = template.split("{}")
    return re.compile("(.+?)".join(map(re.escape, parts)) + r"\Z", re.S)


def zh(value) -> str:
    """The Chinese of a glued English phrase (``str(value)``)."""
    text = str(value)
    if text in PHRASES:
        return PHRASES[text]
    for en, cn in PHRASES.items():
        if "{}" in en:
            m = _pattern(en).match(text)
            if m:
                return cn.format(*m.groups())
    raise KeyError(f"no Chinese for the glued phrase {text!r}: add it to "
                   "labkit.words.PHRASES")


def glue_words(glue, key: str, value, md: bool = False) -> None:
    """Glue ``value`` as ``key`` and its Chinese as ``key`` + ``__zh``
    (``md``: both as Markdown, for ``{glue:md}``)."""
    cn = zh(value)
    if md:
        from IPython.display import Markdown
        value, cn = Markdown(str(value)), Markdown(cn)
    glue(key, value, display=False)
    glue(key + ZH, cn, display=False)


def untwin(en, cn):
    """Two multisets of a page's glued values (English page, Chinese
    page) less the pairs that are a word and its Chinese twin, as
    ``collections.Counter``: what is left differs for another reason."""
    from collections import Counter
    en, cn = Counter(en), Counter(cn)
    for e in list(en.elements()):
        try:
            c = zh(e)
        except KeyError:
            continue
        if cn[c] > 0:
            en[e] -= 1
            cn[c] -= 1
    return +en, +cn
