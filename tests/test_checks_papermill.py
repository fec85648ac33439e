"""labkit.checks under papermill: ``papermill LAB -p NAME VALUE`` with a
bad value stops in the lab's check cell, before any process is started,
with the one line that names the parameter."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.lab import check

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from test_checks import defaults  # noqa: E402

# what `papermill -p NAME VALUE` hands the notebook: its CLI's own parser
CLI = [("memory", "global_batch", "-8"), ("memory", "steps", "2.5"),
       ("memory", "timeout_s", "nan"), ("sharding", "world_size", "100000"),
       ("memory", "steps", "abc"), ("memory", "timeout_s", "inf")]


@pytest.mark.parametrize("lab,name,text", CLI)
def test_papermill_values_are_refused_by_the_check(lab, name, text):
    from papermill.cli import _resolve_type
    with pytest.raises(ValueError, match=f"^{name}="):
        check(lab, {**defaults(lab), name: _resolve_type(text)})


def test_papermill_stops_in_the_check_cell_before_any_launch(tmp_path):
    out = tmp_path / "out.ipynb"
    run = subprocess.run(
        [sys.executable, "-m", "papermill", str(ROOT / "labs" /
                                                "01_memory.ipynb"),
         str(out), "-p", "global_batch", "-8", "-p", "results_dir",
         str(tmp_path / "results")],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode != 0
    assert "ValueError: global_batch=-8: must be an integer" in run.stderr
    nb = json.loads(out.read_text())
    failed = [c for c in nb["cells"] if c["cell_type"] == "code" and any(
        o.get("output_type") == "error" for o in c.get("outputs", []))]
    assert len(failed) == 1
    assert 'check("memory", globals())' in "".join(failed[0]["source"])
    assert not (tmp_path / "results").exists()   # no rank wrote anything
