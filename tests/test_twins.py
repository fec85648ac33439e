"""labkit.twins: a table's or figure's Chinese twin, from the one catalog
(locale/zh_CN/generated.po); book/_ext/zh_twins.py draws it."""
import sys
from pathlib import Path

import pandas as pd
import pytest

from labkit import twins, words

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import zh_twins  # noqa: E402


@pytest.fixture
def catalog(monkeypatch):
    table = {"model states per GPU (GB)": "每 GPU 模型状态（GB）",
             "strategy": "策略", "fits": "放得下",
             "{} nodes": "{} 个节点", "bubble fraction": "气泡率",
             "7.5B parameters, mixed-precision Adam":
                 "75 亿参数，混合精度 Adam"}
    monkeypatch.setattr(words, "catalog", lambda *a: table)
    return table


@pytest.mark.parametrize("text, run", [
    ("model states / GPU (GB)", None),       # two words: a title
    ("needs 16 GPUs or optimizer offload", "GPUs or optimizer offload"),
    ("full_shard all_gather tp8 pp2", None),  # identifiers
    ("FSDP 与 DeepSpeed ZeRO-3", None),       # proper names
    ("the unit is gathered, then freed", "the unit is gathered then freed"),
    ("$N_d$ GPUs x 8 ms", None),
])
def test_an_english_sentence_is_three_words_in_a_row(text, run):
    assert twins.sentence(text) == run


def test_a_table_twin_has_chinese_titles_and_word_cells(catalog):
    df = pd.DataFrame([{"strategy": "full_shard",
                        "model states per GPU (GB)": 1.5,
                        "verdict": "fits", "where": "2 nodes"},
                       {"strategy": "rotor", "model states per GPU (GB)": 12,
                        "verdict": "does not fit", "where": "GPU"}])
    (bundle,) = twins._table_bundle(df).values()
    page = bundle["html"]
    for cn in ("策略", "每 GPU 模型状态（GB）", "放得下", "2 个节点"):
        assert f">{cn}</t" in page
    assert ">full_shard</td>" in page and ">GPU</td>" in page
    assert ">1.5" in page                       # numbers untouched
    assert ">放不下</td>" in page                 # labkit.words.PHRASES
    # a lowercase name is English until the catalog keeps it as it is
    assert bundle["missing"] == ["rotor", "verdict", "where"]
    catalog["rotor"] = "rotor"
    assert twins._table_bundle(df)[twins.MIME]["missing"] == [
        "verdict", "where"]
    styled = twins._table_bundle(df.style.hide(axis="index"))
    assert "策略" in styled[twins.MIME]["html"]


def test_a_figure_twin_is_svg_with_chinese_text(catalog):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    ax.bar(["fits", "full_shard"], [1, 2], label="bubble fraction")
    ax.set_ylabel("model states per GPU (GB)")
    ax.set_title("7.5B parameters, mixed-precision Adam")
    ax.set_xlabel("time (schematic)")
    ax.legend()
    (bundle,) = twins._figure_bundle(fig).values()
    svg = bundle["svg"]
    for cn in ("每 GPU 模型状态（GB）", "75 亿参数，混合精度 Adam", "气泡率",
               "放得下", "full_shard"):
        assert cn in svg
    assert bundle["missing"] == ["time (schematic)"]
    # the English figure is left as it was
    assert ax.get_title() == "7.5B parameters, mixed-precision Adam"
    assert ax.get_legend().get_texts()[0].get_text() == "bubble fraction"
    plt.close(fig)


def test_words_inside_a_formula_in_chinese(catalog):
    latex = r"\text{bubble fraction} = \frac{p-1}{m} \text{ where}"
    cn, missing = zh_twins.math_text(latex)
    assert cn == r"\text{气泡率} = \frac{p-1}{m} \text{ where}"
    assert missing == ["where"]
    assert zh_twins.MIME == twins.MIME


def test_the_catalog_reads_translated_entries():
    cat = words.catalog()
    assert cat and all(cn for cn in cat.values())
    assert words.lookup("3 breaks") == "3 处断点"      # PHRASES first


def test_a_subscripts_name_stays_and_a_list_is_translated_by_part(
        catalog):
    cn, missing = zh_twins.math_text(
        r"T_\text{comm} + T_{\text{bubble fraction}} = \text{bubble fraction}")
    assert cn == (r"T_\text{comm} + T_{\text{bubble fraction}} = "
                  r"\text{气泡率}") and missing == []
    assert twins.translate("fits; 2 nodes") == ("放得下；2 个节点", None)
    assert twins.translate("fits; 2 books") == ("放得下；2 books",
                                                "2 books")


def test_a_chinese_label_draws_its_math_as_plain_letters(catalog, capfd):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    catalog["data-parallel GPUs $N_d$"] = "数据并行 GPU 数 $N_d$"
    assert twins.plain_math("数据并行 GPU 数 $N_d$") == "数据并行 GPU 数 N_d"
    assert twins.plain_math(r"$16\Psi/N_d$ GB") == r"$16\Psi/N_d$ GB"
    fig, ax = plt.subplots()
    ax.set_xlabel("data-parallel GPUs $N_d$")
    svg = twins.figure_svg(fig)[0]
    assert "数据并行 GPU 数 N_d" in svg
    assert "glyph" not in capfd.readouterr().err      # nothing printed
    assert ax.get_xlabel() == "data-parallel GPUs $N_d$"
    plt.close(fig)


def test_the_extension_gives_every_table_and_figure_its_twin(catalog):
    """As a chapter's kernel does (and MyST-NB's glue, which formats
    with the same shell)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from IPython.core.formatters import format_display_data
    from IPython.core.interactiveshell import InteractiveShell
    twins.load_ipython_extension(InteractiveShell.instance())
    df = pd.DataFrame({"strategy": ["ddp"]})
    fig, ax = plt.subplots()
    for obj in (df, df.style, fig):
        bundle, _ = format_display_data(obj)
        assert twins.MIME in bundle, type(obj)
    assert "策略" in format_display_data(df)[0][twins.MIME]["html"]
    plt.close(fig)
