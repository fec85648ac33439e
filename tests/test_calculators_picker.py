"""The calculators' model picker (book/_ext/calc_core.py): ``--preset``, the
command line's own choices, shown on every calculator whose command has
it; a picked preset turns the shape flags off, and the page then computes
what ``python -m labkit COMMAND --preset NAME ... --json`` prints. (The
browser test drives the same in Chromium.)"""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import calc_core  # noqa: E402
import calculators  # noqa: E402

from labkit.predict.model import arch  # noqa: E402


def test_memory_and_flops_have_the_picker():
    for name, argv in (("memory", ["--params", "70e9", "--gpus", "8"]),
                       ("flops", ["--layers", "96", "--hidden", "12288",
                                  "--heads", "96", "--seq", "2048",
                                  "--vocab", "51200", "--batch", "8"])):
        fields = {f["dest"]: f for f in calc_core.fields(name, argv)}
        pick = fields["preset"]
        assert pick["model"] and pick["choices"] == list(arch.PRESETS)
        assert pick["value"] == "" and not pick["required"]
        assert fields["params" if name == "memory" else "layers"]["shape"]
        assert not fields["gpus"]["shape"]


def test_picker_is_shown_even_when_fields_are_listed():
    page = calculators.calculator_html(
        "memory", ["--params", "70e9", "--gpus", "8"], ["gpus"])
    assert '<select data-flag="--preset" name="preset" data-model>' in page
    assert 'data-flag="--params" name="params" data-shape' in page
    assert "llama3-8b" in page


def test_a_picked_preset_drops_the_shape_and_equals_the_cli():
    values = {"--preset": "llama3-8b", "--params": "70e9", "--gpus": "8",
              "--stage": "3"}
    argv = calc_core.argv_from(values)
    assert argv == ["--preset", "llama3-8b", "--gpus", "8", "--stage", "3"]
    assert calc_core.argv_from({**values, "--preset": ""})[:2] == [
        "--params", "70e9"]
    page = calc_core.run("memory", argv)
    r = subprocess.run([sys.executable, "-m", "labkit", "memory", *argv,
                        "--json"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert page == json.loads(r.stdout)
    assert page["ledger"]["params"] == 8_030_261_248


def test_no_picker_no_shape_switch():
    fields = calc_core.fields("pipeline", ["--schedule", "1f1b", "--stages",
                                          "4", "--microbatches", "8"])
    assert not any(f["model"] or f["shape"] for f in fields)
