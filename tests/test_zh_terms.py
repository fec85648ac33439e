"""scripts/zh_terms.py: one term per concept (locale/zh_CN/terms.tsv) and
one translation per repeated sentence, over every catalog."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import zh_terms as T  # noqa: E402


def _rows():
    return {r["chinese"]: r for r in T.terms()}


def test_every_catalog_keeps_the_term_list_and_the_memory():
    msgs = list(T.messages(T.catalogs()))
    assert len(msgs) > 1000
    bad = T.term_faults(msgs) + T.memory_faults(msgs)
    assert not bad, ("python scripts/zh_terms.py --fix, then read the "
                     "diff:\n" + "\n".join(bad))


def test_the_term_list_is_data_with_a_reason_per_term():
    rows = T.terms()
    assert {"微批次", "阶段", "气泡率", "评分", "引擎", "profile"} <= {
        r["chinese"] for r in rows}
    assert all(r["why"] for r in rows)
    assert all(len(no) > 1 for r in rows for no in r["not"])


def test_a_bare_term_or_a_ruled_out_one_is_a_fault():
    msgs = [("a.po", "Each micro-batch waits.", "每个 micro-batch 都在等。"),
            ("b.po", "The bubble fraction.", "气泡占比。"),
            ("c.po", "The `stage` key.", "`stage` 键。"),          # code
            ("d.po", "One micro-batch.", "一个微批次（micro-batch）。")]
    bad = T.term_faults(msgs)
    assert len(bad) == 3 and bad[0].startswith("a.po: 微批次 missing")
    assert "气泡占比 (write 气泡率)" in bad[2]


def test_a_repeated_sentence_has_one_chinese():
    en = "What the seed cards get wrong"
    msgs = [("a.po", en, "种子卡片错在哪里"), ("b.po", en, "种子卡片说错了什么"),
            ("a.po", "nothing", "无"), ("b.po", "nothing", "不写")]
    (bad,) = T.memory_faults(msgs)     # a one-word cell may differ
    assert "2 translations" in bad


def test_fix_writes_the_term_and_nothing_else(tmp_path):
    rows = _rows()
    w = T.write_term
    assert w("每个 micro-batch 都要", rows["微批次"]) == "每个微批次都要"
    assert w("长度 $s$、micro-batch $b$", rows["微批次"]) == \
        "长度 $s$、微批次 $b$"
    assert w("一个 **stage**（流水线阶段），", rows["阶段"]) == \
        "一个 **流水线阶段**（stage），"
    assert w("`engine.step()` 由 engine 接管", rows["引擎"]) == \
        "`engine.step()` 由引擎接管"
    po = tmp_path / "x.po"
    po.write_text('# a comment\nmsgid ""\nmsgstr ""\n\n'
                  '#: book/x.md:1\nmsgid "Each micro-batch."\n'
                  'msgstr "每个 micro-batch。"\n\n'
                  '#: book/x.md:2\nmsgid "Other."\nmsgstr "其他。"\n',
                  encoding="utf-8")
    assert T.fix(po) == 1
    assert po.read_text(encoding="utf-8").splitlines()[6] == \
        'msgstr "每个微批次。"'
    assert T.main([str(po)]) == 0
