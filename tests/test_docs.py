"""The README a newcomer reads, and the docs/ pages it points into.

The README stays short (at most 150 lines) with the two commands in its
first screen; every repository path it names in backticks exists; the
budgets of docs/budgets.md are the benchmark's own constants; no page of
docs/ or the README narrates dated runs (a figure comes from a
benchmark's output, not from a note).

    .venv/bin/python -m pytest tests/test_docs.py -q
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
# written by another change; the README links it


def test_readme_is_short_with_the_two_commands_first():
    lines = README.read_text().splitlines()
    assert len(lines) <= 150, len(lines)
    screen = "\n".join(lines[:30])
    assert "make book" in screen and "make test" in screen


def test_paths_the_readme_and_docs_name_exist():
    missing = []
    for page in [README, *DOCS]:
        text = page.read_text()
        for p in re.findall(r"`((?:docs|book|scripts|labs|labkit|tests)/"
                            r"[\w./-]+\.(?:md|py|ipynb|yaml|sh))`", text):
            if "NN" in p or "NAME" in p:   # a pattern, not a file
                continue
            if not (ROOT / p).exists():
                missing.append(f"{page.name}: {p}")
    assert not missing, missing


def test_no_dated_run_history():
    dated = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b|\bsession\b", re.I)
    found = [f"{p.name}:{i + 1}: {line.strip()}"
             for p in [README, *DOCS]
             for i, line in enumerate(p.read_text().splitlines())
             if dated.search(line)]
    assert not found, found


def test_budgets_page_matches_the_benchmark():
    sys.path.insert(0, str(ROOT / "scripts"))
    import bench_grading
    import benchmark
    text = (ROOT / "docs" / "budgets.md").read_text()
    want = {
        "each lab, CPU profile, 2 cores":
            f"at most {benchmark.LAB_BUDGET_S:g} s",
        "`make test` on a fresh clone, 2 cores":
            f"at most {benchmark.MAKE_TEST_BUDGET_S / 60:g} minutes",
        "`make assignments`":
            f"at most {bench_grading.ASSIGNMENTS_BUDGET_S:g} s",
        "grading one submission (each assignment's answer key)":
            f"at most {bench_grading.GRADE_ONE_BUDGET_S:g} s",
        "`make grade` of a class of 12 honest submissions":
            f"at most {bench_grading.GRADE_CLASS_BUDGET_S:g} s",
    }
    for what, budget in want.items():
        assert f"| {what} | {budget} |" in text, (what, budget)
