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
    uly = dict(zip(table["p"], table["Ulysses: all-to-all per rank (GB)"]))
    assert all(not math.isnan(uly[p]) for p in (2, 4, 8))
    assert math.isnan(uly[16])
    ring16 = table.set_index("p")["ring: sent per rank (GB)"][16]
    assert g["c11_ring_mha_x"] == 16 and ring16 < 24.70 / 15
