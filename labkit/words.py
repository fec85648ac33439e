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
A glued table's column and index names get the same treatment with
:func:`glue_table`. A phrase not in :data:`PHRASES` is looked up in
``locale/zh_CN/generated.po`` (:func:`catalog`), the one catalog of the
text code generates: the column titles, sentence cells and figure text
that :mod:`labkit.twins` puts in Chinese.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

# the catalog of generated text (msgid: the English the code prints,
# msgstr: its Chinese; "{}" a computed part kept as it is)
CATALOG = (Path(__file__).resolve().parent.parent / "locale" / "zh_CN"
           / "generated.po")

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
    # book/running.md: when the run plan's table measured its labs
    "all of them in the sitting that measured the constants":
        "全部与这些常数在同一时段测得",
    "{} of those labs later than the constants, at another hour":
        "其中 {} 个实验是在常数之后、另一个时段测的",
    # column and index names of glued tables (glue_table)
    "model states / GPU (GB)": "每 GPU 模型状态（GB）",
    "{} activations (GB)": "{} 激活（GB）",
    "params (B), Eq. 2": "参数量（B），式 2",
    "params (B), paper": "参数量（B），论文",
    "TFLOP/s per GPU, paper": "每 GPU TFLOP/s，论文",
    "PFLOP/s: GPUs x per GPU": "PFLOP/s：GPU 数 × 每 GPU",
    "PFLOP/s, paper": "PFLOP/s，论文",
    "GB/GPU (heaviest stage)": "GB/GPU（最重的阶段）",
    "stage": "阶段",
    "TFLOP/s per GPU": "每 GPU TFLOP/s",
    "layout": "布局",
    # an op's side of the roofline (labkit.predict.roofline.bound)
    "compute-bound": "计算受限",
    "memory-bound": "访存受限",
    # link names of labkit.predict.choosing.plan_moe: proper names in Chinese text
    "nvlink": "NVLink",
    "infiniband": "InfiniBand",
}


@functools.lru_cache(maxsize=None)
def catalog(path: Path = CATALOG) -> dict:
    """``generated.po`` as ``{English: Chinese}`` (translated entries;
    empty when the file is absent, e.g. an installed labkit)."""
    if not path.exists():
        return {}
    from babel.messages.pofile import read_po
    with open(path, "rb") as f:
        cat = read_po(f)
    return {m.id: m.string for m in cat
            if m.id and m.string and not m.fuzzy}


def lookup(text: str, templates: bool = True) -> str | None:
    """The Chinese of ``text`` from :data:`PHRASES`, then
    :func:`catalog`: an exact entry, else (``templates``) a template
    whose ``{}`` parts are carried over; None when neither has it."""
    for table in (PHRASES, catalog()):
        if text in table:
            return table[text]
    if not templates:
        return None
    for table in (PHRASES, catalog()):   # the longest template first
        for en in sorted((x for x in table if "{}" in x), key=len,
                         reverse=True):
            m = _pattern(en).match(text)
            if m:
                return table[en].format(*m.groups())
    return None


@functools.lru_cache(maxsize=None)
def _pattern(template: str) -> re.Pattern:
    parts = template.split("{}")
    return re.compile("(.+?)".join(map(re.escape, parts)) + r"\Z", re.S)


def zh(value) -> str:
    """The Chinese of a glued English phrase (``str(value)``)."""
    cn = lookup(str(value))
    if cn is None:
        raise KeyError(f"no Chinese for the glued phrase {str(value)!r}: "
                       "add it to locale/zh_CN/generated.po (or "
                       "labkit.words.PHRASES)")
    return cn


def glue_words(glue, key: str, value, md: bool = False) -> None:
    """Glue ``value`` as ``key`` and its Chinese as ``key`` + ``__zh``
    (``md``: both as Markdown, for ``{glue:md}``)."""
    cn = zh(value)
    if md:
        from IPython.display import Markdown
        value, cn = Markdown(str(value)), Markdown(cn)
    glue(key, value, display=False)
    glue(key + ZH, cn, display=False)


def _label(name):
    """A column or index name in Chinese; a name of symbols and
    abbreviations (``TP``, ``MFU %``, ``GPUs``) stays as it is."""
    if isinstance(name, str) and re.search(r"[a-z]{3,}", name):
        return zh(name)
    return name


def glue_table(glue, key: str, table) -> None:
    """Glue a pandas DataFrame as ``key`` and, with its column and index
    names in Chinese (:func:`zh`), as ``key`` + ``__zh``: the same cells,
    computed once. The Chinese build shows the twin in a
    ``{glue:figure}`` of ``key`` (``book/_ext/zh_tables.py``)."""
    cn = table.rename(columns=_label)
    cn.index = cn.index.rename(_label(table.index.name))
    glue(key, table, display=False)
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
