"""The chapters that name real models price them with their architecture
record: chapter 11's first code cell, run here as the book build runs it."""
import math
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _first_cell(chapter: str) -> dict:
    text = (ROOT / "book" / chapter).read_text()
    src = re.search(r"```\{code-cell\} ipython3\n(.*?)\n```", text,
                    re.S).group(1)
    src = "\n".join(line for line in src.splitlines()
                    if not line.startswith(":tags"))
    glued = {}
    ns = {"__name__": "chapter"}
    src = src.replace("from myst_nb import glue", "")
    ns["glue"] = lambda k, v, display=True: glued.__setitem__(k, v)
    exec(compile(src, chapter, "exec"), ns)
    return {**ns, "glue": glued}


def test_chapter11_llama405b_has_8_kv_heads_and_no_ulysses_above_8():
    ns = _first_cell("11_context_parallel.md")
    g, table = ns["glue"], ns["table"]
    assert g["c11_kv_heads"] == 8 and g["c11_heads"] == 128
    uly = dict(zip(table["p"], table["Ulysses: sent per rank (GB)"]))
    assert all(not math.isnan(uly[p]) for p in (2, 4, 8))
    assert math.isnan(uly[16])
    # bytes that leave the rank, as the ring column: payload x (p-1)/p
    cp, gb = ns["CP"], ns["GB"]
    payload = cp.ulysses(ns["m405"], 1, 131072, 8)["all_to_all"]["bytes"]
    assert uly[8] == payload * 7 / 8 / gb
    ring16 = table.set_index("p")["ring: sent per rank (GB)"][16]
    assert g["c11_ring_mha_x"] == 16 and ring16 < 24.70 / 15


def test_chapter1_from_gpt2_to_llama_uses_the_real_block():
    text = (ROOT / "book" / "01_memory.md").read_text()
    cells = re.findall(r"```\{code-cell\} ipython3\n(.*?)\n```", text, re.S)
    glued = {}
    ns = {"glue": lambda k, v, display=True: glued.__setitem__(k, v)}
    for c in cells:
        if "shape_rows" in c:      # the 70B dry run: tests/test_dryrun.py
            continue
        c = "\n".join(line for line in c.splitlines()
                      if not line.startswith(":tags"))
        exec(c.replace("from myst_nb import glue", ""), ns)
    assert glued["l70_psi"] * 1e9 == 68_976_648_192
    assert glued["l70_kv_x"] == 8
    used = set(re.findall(r"\{glue:text\}`(\w+)", text))
    assert not {k for k in used - set(glued) if not k.startswith("dry_")}
    rows = ns["g2l"].set_index("model")
    assert rows.loc["Llama 2 70B", "ring K/V sent per layer, p = 8 (GB)"] \
        * 8 == rows.loc["GPT shape, 70B-class",
                        "ring K/V sent per layer, p = 8 (GB)"]
