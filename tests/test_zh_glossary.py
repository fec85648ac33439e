"""The Chinese glossary (locale/zh_CN/pages/glossary.md, 中英术语表).

Every term links the section that defines it: each ``{ref}`` target is a
label of a chapter (``(label)=`` above its heading, the same in both
editions), each row has at least one link, and the seed cards' own terms
(★) are all there, each written in the cards' Chinese (a term the cards
write in English is ☆, the card's word beside it). The strict build of
the Chinese edition resolves the same links; this test names a broken one
without a build.
"""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GLOSSARY = ROOT / "locale" / "zh_CN" / "pages" / "glossary.md"
REF = re.compile(r"\{ref\}`(?:[^`<]*<)?([^`>]+)>?`")
DOC = re.compile(r"\{doc\}`([^`]+)`")
# the seeds' words (issue 32) and the translators' (the lead's list)
SEED_TERMS = ["显存账", "两层账", "分片", "通信量", "预取", "流水线气泡",
              "算力扩展 vs 显存扩展", "重计算"]
SEEDS = ROOT.parent / "shared" / "seeds"     # the cards, where present
TERMS = ["常驻参数", "重新分片", "心跳", "平均故障间隔时间", "中转缓冲区",
         "列并行 / 行并行", "部分和", "残差流", "词表并行", "分组查询注意力",
         "在线 softmax", "因果掩码", "环形注意力",
         "选择性重计算 / 完全重计算", "显存快照", "有效载荷", "关键路径",
         "显存不足", "流水线阶段", "交错式 1F1B", "模型 FLOPs / 硬件 FLOPs",
         "点对点", "进程组", "子网格"]


def rows() -> list[list[str]]:
    out = []
    for line in GLOSSARY.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] not in ("中文", "---") \
                and not set(cells[0]) <= {"-"}:
            out.append(cells)
    return out


def labels() -> set[str]:
    text = "".join(p.read_text() for p in (ROOT / "book").glob("*.md"))
    return set(re.findall(r"^\(([\w-]+)\)=$", text, re.M))


def test_every_link_is_a_label_of_the_book():
    known = labels()
    targets = REF.findall(GLOSSARY.read_text())
    assert len(targets) > 80
    assert not sorted(set(targets) - known)
    for doc in DOC.findall(GLOSSARY.read_text()):
        assert (ROOT / "book" / f"{doc}.md").exists(), doc


def test_every_term_links_its_section():
    table = rows()
    assert len(table) > 70
    for zh, en, where in table:
        assert zh and en, (zh, en)
        assert REF.search(where) or DOC.search(where), zh
    # a whole chapter only where no section defines the term
    assert sum(bool(DOC.search(r[2])) for r in table) <= 2


def test_the_seeds_and_the_translators_terms_are_there():
    have = " ".join(r[0] for r in rows())
    missing = [t for t in SEED_TERMS + TERMS if t not in have]
    assert not missing
    seeds = [r[0] for r in rows() if "★" in r[0]]
    assert all(any(t in s for s in seeds) for t in SEED_TERMS[:7])


def test_a_starred_term_is_the_cards_own_chinese():
    """★ marks the cards' words: each is in the cards' text; a concept
    they write in English (Offload, bucket) is ☆ with their word."""
    import pytest
    cards = list(SEEDS.glob("*.txt"))
    if not cards:
        pytest.skip(f"no seed cards at {SEEDS}")
    text = "".join(p.read_text(encoding="utf-8") for p in cards)
    bad = []
    for zh, *_ in rows():
        if "★" in zh:
            words = re.split(r"[、（）()★/]| vs ", zh.split("★")[0])
            bad += [w.strip() for w in words
                    if w.strip() and w.strip() not in text]
        if "☆" in zh:
            word = re.search(r"卡片：([^）]+)）", zh)
            if not word or word.group(1) not in text:
                bad.append(zh)
    assert not bad, bad
