"""Each lab page links its assignment as handed out, never the master.

scripts/build_book.py stages every master's student notebook
(scripts/handouts.py) in ``src/assignments``; the last
cell of each lab links it with a download role, so a self-learner who
follows the link gets the questions and starter code, not the answers.
"""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import assignments  # noqa: E402
import handouts  # noqa: E402

LABS = sorted((ROOT / "labs").glob("[0-9]*_*.ipynb"))


def text(nb: Path) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(nb.read_text())["cells"]]


@pytest.mark.parametrize("lab", LABS, ids=lambda p: p.stem)
def test_every_lab_links_its_handout(lab):
    links = [t for t in text(lab) if "{download}" in t and
             "/assignments/" in t]
    assert len(links) == 1, "one Assignment cell"
    assert f"<../assignments/{lab.name}>`" in links[0]
    assert "labs/assignments" not in links[0], "never the master"
    master = "\n".join(text(ROOT / "labs" / "assignments" / lab.name))
    if "buildit.run(" in master:    # a build-it: how to debug it
        assert "buildit.smoke(" in links[0] and "run_dir=" in links[0]


def test_a_handout_has_no_solution(tmp_path):
    name = "04_zero"
    out = handouts.handout(name, assignments.discover()[name], tmp_path)
    assert out == tmp_path / f"{name}.ipynb"
    assert assignments.leaked(out) == []
    cells = json.loads(out.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells
                     if c["cell_type"] == "code")
    # lines of the answer key (only in the master)
    assert "def reduce(self, i, p):" in "\n".join(
        text(ROOT / "labs" / "assignments" / f"{name}.ipynb"))
    assert "def reduce(self, i, p):" not in code
    assert "hidden: true" not in code and "class ShardedAdam" in code
