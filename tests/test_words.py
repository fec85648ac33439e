"""labkit.words: a glued word's or table's Chinese twin, from one value."""
import pandas as pd
import pytest

from labkit import words


def _glue():
    got = {}

    def glue(key, value, display=True):
        assert display is False
        got[key] = value
    return glue, got


def test_glue_words_glues_both_twins_from_one_value():
    glue, got = _glue()
    words.glue_words(glue, "k", "does not fit")
    assert got == {"k": "does not fit", "k__zh": "放不下"}
    words.glue_words(glue, "n", "3 breaks")
    assert got["n__zh"] == "3 处断点"


def test_a_phrase_without_chinese_stops_with_its_name():
    with pytest.raises(KeyError, match="'no such phrase'"):
        words.zh("no such phrase")


def test_glue_table_keeps_the_cells_and_translates_the_names():
    glue, got = _glue()
    t = pd.DataFrame([{"layout": "tp8 pp2 dp4 zero1 b1x8 recompute=full",
                       "GB/GPU (heaviest stage)": 61.25, "MFU %": 41.0,
                       "gpipe activations (GB)": 3.5}]).set_index("layout")
    words.glue_table(glue, "t", t)
    en, cn = got["t"], got["t__zh"]
    assert en is t and cn.values.tolist() == t.values.tolist()
    assert list(cn.index) == list(t.index)        # identifiers stay
    assert cn.index.name == "布局"
    assert list(cn.columns) == ["GB/GPU（最重的阶段）", "MFU %",
                                "gpipe 激活（GB）"]
    assert list(t.columns)[0] == "GB/GPU (heaviest stage)"   # untouched
