"""The Chinese edition keeps step with the English (scripts/zh_catalogs.py).

The unit tests need babel only (well under a second). The two that read
the book with Sphinx's gettext builder (nothing executed: about 8 CPU-s
for the whole book, 3 for one page) run in ``make test`` too, because
once a page is translated an English change must carry its Chinese in the
same commit: every required paragraph of every page of the real book has
its Chinese (a missing, stale or wrong one fails, named by page, line and
first words), and a copy of the book with one English sentence changed
fails, naming that page and paragraph.
"""
import shutil
import sys
from pathlib import Path

import pytest
from babel.messages.catalog import Catalog
from babel.messages.pofile import write_po

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import zh_catalogs as Z  # noqa: E402

EN = ("The optimizer's share is $K$ = {glue:text}`mp_k` bytes, so the "
      "model states cost {glue:text}`mp_total:.0f`$\\Psi$ bytes on 8 GPUs "
      "(`main_grad`, chapter 3).")
ZH = ("优化器的份额是 $K$ = {glue:text}`mp_k` 字节，所以在 8 张 GPU 上模型"
      "状态占 {glue:text}`mp_total:.0f`$\\Psi$ 字节（`main_grad`，第 3 章）。")


def catalog(entries, fuzzy=()):
    c = Catalog(locale="zh_CN")
    for i, (en, zh) in enumerate(entries):
        c.add(en, zh, locations=[("book/01_memory.md", 10 + i)],
              flags=["fuzzy"] if en in fuzzy else [])
    return c


def test_what_is_prose():
    assert Z.prose(EN) and Z.prose("what") and Z.prose("Training at Scale")
    for not_prose in ("fp16 / bf16", "{glue:text}`mp_p`", "4", "DDP, 8",
                      "$\\Psi$", "`--params 70e9`",
                      "\n\\begin{aligned}\n\\text{ZeRO-0 (DDP)} &: 2\\Psi"
                      "\n\\end{aligned}\n"):
        assert not Z.prose(not_prose), not_prose


def test_a_faithful_translation_passes():
    pot = catalog([(EN, ""), ("fp32", "")])
    assert Z.check_page("book/01_memory", pot, catalog([(EN, ZH)])) == []


@pytest.mark.parametrize("zh, kind", [
    ("", "no Chinese (missing)"),
    (EN, "English left in the Chinese"),
    (ZH.replace("`mp_k`", "`mp_p`"), "glue differs"),
    (ZH.replace("`main_grad`", "main_grad"), "code differs"),
    (ZH.replace("$K$", "K"), "math differs"),
    (ZH.replace("8 张", "八张"), "number differs"),
])
def test_each_way_a_translation_goes_wrong_is_named(zh, kind):
    pot = catalog([(EN, "")])
    problems = Z.check_page("book/01_memory", pot, catalog([(EN, zh)]))
    assert [p.kind.split(" (")[0] for p in problems] == [kind.split(" (")[0]]
    assert str(problems[0]).startswith("book/01_memory.md line 10: ")
    assert "The optimizer's share" in str(problems[0])


def test_a_numbered_heading_must_not_read_as_a_list():
    pot = catalog([("1. Check the parameters", "")])
    ok = catalog([("1. Check the parameters", "1\\. 先检查参数")])
    bad = catalog([("1. Check the parameters", "1. 先检查参数")])
    assert Z.check_page("labs/01_memory", pot, ok) == []
    assert "starts like a list item" in str(
        Z.check_page("labs/01_memory", pot, bad)[0])


def test_a_notebook_paragraph_is_named_by_cell_and_line():
    assert Z.where("labs/01_memory", [("labs/01_memory.ipynb", 40003)]) \
        == "labs/01_memory.ipynb cell 3 line 3"


def test_an_english_change_makes_the_old_chinese_fuzzy(tmp_path):
    """update: the changed English keeps its old Chinese, marked fuzzy;
    check: fails on it, naming the paragraph, until it is re-translated."""
    pot_dir, locale = tmp_path / "pot", tmp_path / "locale"
    (pot_dir / "book").mkdir(parents=True)

    def pot(text):
        with open(pot_dir / "book" / "01_memory.pot", "wb") as f:
            write_po(f, catalog([(text, "")]))

    pot(EN)
    Z.update(pot_dir, locale)
    po_path = Z.po_dir(locale) / "book" / "01_memory.po"
    po = Z.read(po_path)
    po[EN].string = ZH
    with open(po_path, "wb") as f:
        write_po(f, po)
    assert Z.check(pot_dir, locale) == []
    changed = EN.replace("on 8 GPUs", "on 8 GPUs of 80 GB")
    pot(changed)
    missing = Z.check(pot_dir, locale)   # not merged yet: no entry at all
    assert missing == [
        "book/01_memory.md line 10: no Chinese (missing): "
        "\"The optimizer's share is $K$ = {glue:text}`mp_k` bytes, so "
        "the mode...\""]
    Z.update(pot_dir, locale)
    po = Z.read(po_path)
    assert po[changed].fuzzy and po[changed].string == ZH
    # the old English beside it, for the translator (babel writes the
    # "#| msgid" line but does not read it back)
    assert '#| msgid "" "The optimizer\'s share' in po_path.read_text()
    stale = Z.check(pot_dir, locale)
    assert len(stale) == 1 and "stale Chinese (fuzzy" in stale[0]
    assert stale[0].startswith("book/01_memory.md line 10: ")


def test_the_untranslated_list_only_shrinks(tmp_path):
    pot_dir, locale = tmp_path / "pot", tmp_path / "locale"
    (pot_dir / "book").mkdir(parents=True)
    with open(pot_dir / "book" / "intro.pot", "wb") as f:
        write_po(f, catalog([("symbol", "")]))
    (locale / "zh_CN").mkdir(parents=True)
    (locale / "zh_CN" / "UNTRANSLATED").write_text("book/intro\nbook/gone\n")
    Z.update(pot_dir, locale)
    po_path = Z.po_dir(locale) / "book" / "intro.po"
    po = Z.read(po_path)
    po["symbol"].string = "符号"
    with open(po_path, "wb") as f:
        write_po(f, po)
    assert Z.check(pot_dir, locale) == [
        "book/intro: fully translated, but listed in "
        "locale/zh_CN/UNTRANSLATED: remove it there",
        "locale/zh_CN/UNTRANSLATED lists book/gone, which is not a page "
        "of the book"]


def test_every_required_paragraph_has_its_chinese(tmp_path):
    """The real check over the real book (``zh_catalogs.py check``)."""
    lines = Z.check(Z.extract(tmp_path))
    assert not lines, ("English paragraphs without their Chinese (translate "
                       "them in locale/zh_CN/LC_MESSAGES/<page>.po after "
                       "`python scripts/zh_catalogs.py update`):\n"
                       + "\n".join(lines))


def test_an_english_edit_without_its_chinese_fails(tmp_path):
    """Change one sentence of book/intro.md: check names page and line."""
    root = tmp_path / "repo"
    root.mkdir()
    for name in Z.SOURCES:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy2)(
            ROOT / name, root / name)
    intro = root / "book" / "intro.md"
    text = intro.read_text()
    old = "A CPU figure is never a GPU figure."
    assert old in text
    intro.write_text(text.replace(old, "A CPU figure is not a GPU figure."))
    pot = Z.extract(tmp_path / "out", root, pages=["book/intro"])
    lines = Z.check(pot)
    lines = [ln for ln in lines if ln.startswith("book/intro")]
    assert len(lines) == 1, lines
    assert lines[0].startswith("book/intro.md line 15: no Chinese "
                               "(missing): \"Numbers in this book")


def test_a_number_is_read_whole_and_a_word_s_digits_are_not():
    """'1.5x' is the number 1.5 (so "1.5 倍" carries it), an exponent is
    part of its number, and fp32, 1F1B, 80GB or H100 hold no number."""

    got = {t: Z.NUMBER.findall(t) for t in (
        "1.5x DDP", "1.5 倍", "6.1e-5", "8x", "8个", "12,345.6 GB",
        "1F1B", "fp32", "80GB", "H100", "3D", "v2.1.")}
    assert got == {"1.5x DDP": ["1.5"], "1.5 倍": ["1.5"],
                   "6.1e-5": ["6.1e-5"], "8x": ["8"], "8个": ["8"],
                   "12,345.6 GB": ["12,345.6"], "1F1B": [], "fp32": [],
                   "80GB": [], "H100": [], "3D": [], "v2.1.": []}


def test_a_role_alone_or_a_proper_name_alone_is_not_english_prose():
    """{doc}`04_zero` (the role's name is not a word), Colossal-AI,
    DeepSpeed need no Chinese; a role's own text and plain words do."""
    for name in ("{doc}`04_zero`", "{doc}`03_sharding`, {doc}`04_zero`",
                 "Colossal-AI", "Megatron-LM", "9 (Colossal-AI)",
                 "PyTorch FSDP", "DeepSpeed", "GPT-3", "{ref}`notation`"):
        assert not Z.prose(name), name
    for words in ("Summary", "{ref}`chapter 6 <iv-megatron>`",
                  "DeepSpeed trains it", "micro-batch", "see {doc}`x`"):
        assert Z.prose(words), words


def test_a_glued_word_shows_its_chinese_twin():
    """glue_words(glue, "k", ...) glues k and k__zh: the Chinese shows
    k__zh (the same glued value for the check), never k."""
    from labkit import words as W
    keys = Z.twins('glue_words(glue, "c13_ds_fits", "fits")\n'
                   'glue_words(glue, f"ex13_{stage}_fits", x, md=True)')
    en = ("The model {glue:text}`c13_ds_fits` in 80 GB "
          "({glue:text}`ex13_ddp_fits`).")
    good = "在 80 GB 内{glue:text}`c13_ds_fits__zh`（{glue:text}" \
           "`ex13_ddp_fits__zh`）。"
    pot = catalog([(en, "")])
    assert Z.check_page("book/13_experts", pot, catalog([(en, good)]),
                        keys) == []
    shown = good.replace("c13_ds_fits__zh", "c13_ds_fits")
    kinds = [p.kind for p in Z.check_page(
        "book/13_experts", pot, catalog([(en, shown)]), keys)]
    assert kinds == ["English word glued in the Chinese (write "
                     "{glue:text}`c13_ds_fits__zh`)"]
    assert "no Chinese twin" in Z.check_page(
        "book/13_experts", pot, catalog([(en, good)]), keys[1:])[0].kind
    glued = {}
    W.glue_words(lambda k, v, display: glued.__setitem__(k, v), "k", False)
    assert glued == {"k": False, "k__zh": "否"}
    assert W.zh("3 breaks") == "3 处断点" and W.zh("4.2 minutes") == \
        "4.2 分钟"
    with pytest.raises(KeyError, match="labkit.words.PHRASES"):
        W.zh("maybe")


def test_the_html_comparison_can_pair_a_word_with_its_twin():
    """labkit.words.untwin: what the two editions' glued values differ by,
    once each English word is paired with its Chinese twin."""
    from labkit.words import untwin
    assert untwin({"fits": 1, "infiniband": 1, "3.5": 1},
                  {"放得下": 1, "InfiniBand": 1, "3.4": 1}) == (
        {"3.5": 1}, {"3.4": 1})


def test_a_glued_figure_s_caption_is_extracted_through_a_stand_in():
    """Nothing is executed at extraction, so {glue:figure} would drop its
    caption: a plain figure with the same caption and options stands in."""
    src = "```{glue:figure} l405_table\n:name: tbl-x\n\nThe caption.\n```\n"
    assert Z.figure_stand_ins(src) == ("```{figure} _glue/l405_table.png\n"
                                       ":name: tbl-x\n\nThe caption.\n```\n")
