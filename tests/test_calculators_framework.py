"""The memory calculator's framework select (book/_ext/calc_core.py): the
command line's own ``--framework`` choices, in both editions, and picking
one changes the verdict exactly as ``python -m labkit memory`` does."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import calc_core  # noqa: E402
import calculators  # noqa: E402

from labkit.predict.memory.frameworks import FRAMEWORKS  # noqa: E402

# Llama 3 8B on 2 GPUs, ZeRO-2: the ledger fits, DeepSpeed's fp32
# gradient partition and reduce bucket do not
ARGV = ["--preset", "llama3-8b", "--gpus", "2", "--gpu-mem", "80",
        "--stage", "2"]


def test_the_framework_is_a_select_of_the_command_lines_choices():
    f = {x["dest"]: x for x in calc_core.fields("memory", ARGV)}
    assert f["framework"]["kind"] == "choice"
    assert f["framework"]["choices"] == list(FRAMEWORKS)
    for lang, word in (("en", "beside the ledger"), ("zh", "显存账之外")):
        page = calculators.calculator_html("memory", ARGV, ["framework"],
                                           lang)
        assert 'data-flag="--framework"' in page and word in page


def test_picking_a_framework_changes_the_verdict_as_the_cli_does():
    got = {}
    for fw in ("ledger", "deepspeed"):
        argv = ARGV + ["--framework", fw]
        page = calc_core.run("memory", argv)
        r = subprocess.run([sys.executable, "-m", "labkit", "memory",
                            *argv, "--json"], capture_output=True,
                           text=True, cwd=ROOT, timeout=300)
        assert r.returncode == 0, r.stderr
        assert page == json.loads(r.stdout)
        got[fw] = page["verdict"]
    assert got["ledger"]["fits"] and not got["deepspeed"]["fits"]
    assert "headroom" in got["ledger"]["sentence"]
