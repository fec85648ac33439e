"""The Chinese twin of a chapter's table or figure, made where it is shown.

    %load_ext labkit.twins      # in a notebook; the book build loads it
                                # into every chapter's kernel itself

A chapter shows a pandas table or a matplotlib figure as it always did.
With this IPython extension loaded, each such output carries, beside its
English HTML or PNG, a Chinese twin under :data:`MIME`: the same table
with its column titles and word cells in Chinese, the same figure drawn
again with its title, axes, legend and labels in Chinese. The Chinese
comes from one catalog, ``locale/zh_CN/generated.po``
(:func:`labkit.words.lookup`); numbers, identifiers (``full_shard``) and
proper names (FSDP, NVLink) are kept as they are.

Why a twin in the same output: the English build executes each chapter
once, and the Chinese build reads the same outputs from the jupyter-cache
(``scripts/book_zh.py``). MyST-NB's English build never picks
:data:`MIME`; the Chinese one puts it first
(``locale/zh_CN/config.yml``) and ``book/_ext/zh_twins.py`` draws it.
A phrase without Chinese stays English in the twin and is named in its
``missing`` list: the Chinese build warns with its name (strict: fails).

Why SVG with its text as text: the machine that builds the book needs no
Chinese font; the reader's browser draws the characters with its own.
"""
from __future__ import annotations

import html as _html
import io
import logging
import re
import warnings

from labkit.words import lookup

MIME = "application/vnd.labkit.zh-twin+json"
CJK = re.compile(r"[\u3400-\u9fff\uff00-\uffef\u3000-\u303f]")
# Names and abbreviations a Chinese sentence writes in Latin letters
# (frameworks, hardware, formats, people and papers): not English words.
PROPER = frozenset("""
    Adam AdamW Ampere Apex Blackwell Colossal ColossalAI DeepSeek DeepSpeed
    Dubey Ethernet FlashAttention Gemini GPipe Hopper InfiniBand Kaplan
    Korthikanti Llama Megatron Mixtral NCCL NVLink NVSwitch NVIDIA Narayanan
    Nsight PyTorch Qwen Rajbhandari RoCE SGD Shoeybi Transformer
    TorchTitan Triton Ulysses ZeRO Zero
""".split())
# the course's lowercase names that code prints (a strategy, a backend,
# a schedule): identifiers, the same in both editions
NAMES = frozenset("ddp fsdp gpipe gloo nccl cpu gpu rank all-reduce "
                  "all-gather reduce-scatter all-to-all".split())
# unit symbols with lowercase letters: a quantity, not a word
UNITS = frozenset("ms us ns s min GiB MiB KiB TiB Gbit Gbps GHz MHz "
                  "dB px".split())
_IDENT = re.compile(r"[_=<>\\{}]|::|[A-Za-z]\.[A-Za-z]|\(\)|^-"
                    r"|[A-Za-z][0-9]|[0-9][a-z]")
_WORD = re.compile(r"[A-Za-z][A-Za-z'’]*(?:-[A-Za-z]+)*")   # all-gather
_MATH = re.compile(r"\$[^$]*\$")


def english_words(text: str) -> list[list[str]]:
    """The runs of English words in ``text``. A word has a lowercase
    letter and is not a proper name or a unit; punctuation, proper names
    and abbreviations (``GPU``) neither count nor end a run; a number, an
    identifier (``full_shard``, ``a.b``, ``f()``), ``$math$`` or a Chinese
    character ends it."""
    runs, run = [], []
    for token in _MATH.sub(" 0 ", text).split():
        if _IDENT.search(token):
            runs, run = runs + [run], []
            continue
        for piece in re.split(r"([A-Za-z][A-Za-z'’]*(?:-[A-Za-z]+)*)",
                              token):
            if _WORD.fullmatch(piece):
                if (len(piece) > 1 and re.search("[a-z]", piece)
                        and piece not in PROPER | UNITS | NAMES):
                    run.append(piece)
            elif re.search(r"[0-9]", piece) or CJK.search(piece):
                runs, run = runs + [run], []
    return [r for r in runs + [run] if r]


def needs_chinese(text: str) -> bool:
    """``text`` holds an English word and no Chinese."""
    return bool(english_words(text)) and not CJK.search(text)


def sentence(text: str, n: int = 3) -> str | None:
    """The first run of ``n`` or more English words in ``text`` (what a
    Chinese page must not show), or None."""
    for run in english_words(text):
        if len(run) >= n:
            return " ".join(run)
    return None


def translate(text: str) -> tuple[str, str | None]:
    """``text`` in Chinese (as it is when it needs none) and the English
    that has no Chinese yet (or None). A list of parts joined by "; "
    (a table cell of several items) is translated part by part."""
    if not needs_chinese(text):
        return text, None
    cn = lookup(text.strip(), templates="; " not in text)
    if cn is None and "; " in text:
        parts = [translate(x) for x in text.strip().split("; ")]
        miss = [m for _, m in parts if m]
        return ("；".join(x for x, _ in parts),
                "; ".join(miss) if miss else None)
    return (text, text.strip()) if cn is None else (cn, None)


_CELL = re.compile(r"(<(t[hd]|caption)\b[^>]*>)([^<]*)(</\2>)")


def table_html(page: str) -> tuple[str, list[str]]:
    """A table's HTML with its cells (titles, index, word cells, caption)
    in Chinese, and the English left without Chinese."""
    missing = []

    def cell(m):
        cn, miss = translate(_html.unescape(m.group(3)))
        if miss:
            missing.append(miss)
        return m.group(1) + _html.escape(cn, quote=False) + m.group(4)
    return _CELL.sub(cell, page), missing


def _wrapped(formatter, missing):
    """A tick formatter whose string labels come out in Chinese."""
    from matplotlib.ticker import FuncFormatter

    def label(x, pos=None):
        cn, miss = translate(formatter(x, pos))
        if miss:
            missing.append(miss)
        return plain_math(cn)
    return FuncFormatter(label)


_TEX = {r"\Psi": "Ψ", r"\Phi": "Φ", r"\alpha": "α", r"\beta": "β",
        r"\times": "×", r"\cdot": "·", r"\le": "≤", r"\ge": "≥"}


def plain_math(text: str) -> str:
    """``$...$`` of a figure's Chinese text as plain letters: matplotlib
    draws a string with ``$`` wholly as mathtext, whose fonts have no
    Chinese (``$N_d$`` -> ``N_d``, ``$\\Psi$`` -> ``Ψ``)."""
    def one(m):
        tex = m.group(1)
        for k, v in _TEX.items():
            tex = tex.replace(k, v)
        return re.sub(r"[{}\\]", "", tex)
    if not CJK.search(text):
        return text
    return re.sub(r"(?<!\\)\$([^$]*)\$", one, text)


def figure_svg(fig) -> tuple[str, list[str]]:
    """The figure drawn again as SVG with its text in Chinese, and the
    English left without Chinese; the figure itself is left as it was."""
    import matplotlib as mpl
    from matplotlib.text import Text
    from matplotlib.category import StrCategoryFormatter
    from matplotlib.ticker import (FixedFormatter, FormatStrFormatter,
                                   FuncFormatter, StrMethodFormatter)
    named = (FixedFormatter, StrCategoryFormatter, FuncFormatter,
             StrMethodFormatter, FormatStrFormatter)   # set_yticks(..., labels)
    missing, undo = [], []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for which in ("major", "minor"):
                f = getattr(axis, f"get_{which}_formatter")()
                if isinstance(f, named):
                    setter = getattr(axis, f"set_{which}_formatter")
                    setter(_wrapped(f, missing))
                    undo.append(lambda s=setter, f=f: s(f))
    ticks = {id(t) for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
             for tick in axis.get_major_ticks() + axis.get_minor_ticks()
             for t in (tick.label1, tick.label2)}
    for t in fig.findobj(Text):
        text = t.get_text()
        if id(t) in ticks or not text:
            continue
        cn, miss = translate(text)
        if miss:
            missing.append(miss)
        cn = plain_math(cn)
        if cn != text:
            t.set_text(cn)
            undo.append(lambda t=t, s=text: t.set_text(s))
    buf = io.StringIO()
    log = logging.getLogger("matplotlib")     # "Font ... has no glyph"
    level = log.level
    try:
        log.setLevel(logging.ERROR)
        with warnings.catch_warnings(), \
                mpl.rc_context({"svg.fonttype": "none",
                                "svg.hashsalt": "labkit"}):
            warnings.simplefilter("ignore")   # glyphs the font lacks
            fig.savefig(buf, format="svg", bbox_inches="tight")
    finally:
        log.setLevel(level)
        for step in reversed(undo):
            step()
    return buf.getvalue(), sorted(set(missing))


def _table_bundle(obj):
    page = obj.to_html() if hasattr(obj, "to_html") and not hasattr(
        obj, "_repr_html_") else obj._repr_html_()
    cn, missing = table_html(page)
    return {MIME: {"kind": "html", "html": cn,
                   "missing": sorted(set(missing))}}


def _figure_bundle(fig):
    if not fig.axes and not fig.texts:
        return {}
    svg, missing = figure_svg(fig)
    return {MIME: {"kind": "svg", "svg": svg, "missing": missing}}


def load_ipython_extension(ip) -> None:
    """Every table and figure this kernel shows carries its twin."""
    f = ip.display_formatter.mimebundle_formatter
    f.for_type_by_name("matplotlib.figure", "Figure", _figure_bundle)
    for module in ("pandas", "pandas.core.frame"):   # pandas 3 says pandas
        f.for_type_by_name(module, "DataFrame", _table_bundle)
    f.for_type_by_name("pandas.io.formats.style", "Styler", _table_bundle)
