"""Expert parallelism's build-it under grading: the output's and the
gradients' differences from the reference are the checker's, computed from
the tensors the ranks hand over (labkit.buildit.experts.reference), never
a number a rank reports. On forked ranks on the hub: the key scores full
marks, the blank 0, each wrong version its points, and a rank that
rewrites its saved record (tests/buildit/hostile_moe_diffs.py) keeps the
wrong version's."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from labkit import buildit

ROOT = Path(__file__).resolve().parent.parent
LAB = "experts"
H = buildit.harness(LAB)
CFG = {**H.CONFIG, **H.HIDDEN}
FIXTURES = ROOT / "tests" / "buildit"
FAILS = {"moe_no_gate_weights": {"output", "grads"},
         "moe_no_unpermute": {"output", "grads"},
         "moe_all_gather": {"comm"},
         "hostile_moe_diffs": {"output", "grads"}}
RUN_ALL = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from grading.ranks import fork_ranks
srcs, work = json.loads(sys.stdin.read()), Path(sys.argv[2])
cfg = json.loads(sys.argv[3])
out = {n: fork_ranks(sys.argv[4], s, cfg, int(sys.argv[5]), work / n, 120,
                     hub=True) for n, s in srcs.items()}
print(json.dumps(out))
"""


def on_the_hub(lab: str, srcs: dict, tmp_path) -> dict:
    """Every source's rerun result on forked ranks on the hub (one
    process for all), as ``labkit.buildit.grade`` reads it."""
    h = buildit.harness(lab)
    r = subprocess.run([sys.executable, "-c", RUN_ALL,
                        str(ROOT / "scripts"), str(tmp_path),
                        json.dumps(h.HIDDEN), lab, str(buildit.LABS[lab])],
                       input=json.dumps(srcs), capture_output=True,
                       text=True, timeout=900,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for name, res in got.items():
        # ours, and the seed of the data the hub dealt (buildit/dealt.py)
        dealt = {k: v for k, v in res["config"].items() if k == "data_seed"}
        res.update(lab=lab, config={**h.CONFIG, **h.HIDDEN, **dealt},
                   source=srcs[name], loopback_bytes=0,
                   wire_bytes=res["hub"]["wire_bytes"])
    return got


def test_a_rank_reports_tensors_not_differences():
    res = {"lab": LAB, "config": CFG, "error": None,
           "ranks": [{"output_diff": 0.0, "grad_diffs": {"input": 0.0},
                      "output": None, "grads": {},
                      "rows": [0, 0], "forward": [], "backward": []}] * 4}
    rows = {r["check"]: r for r in buildit.grade(res)}
    assert not rows["output"]["passed"] and not rows["grads"]["passed"]


@pytest.mark.distributed
def test_on_the_hub_key_full_blank_zero_wrong_and_hostile_partial(
        tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "tests"))
    import test_buildit as TB
    monkeypatch.setitem(TB.MASTERS, LAB, "13_experts")
    cell = TB.solution_cell(LAB)
    srcs = {"key": TB.key_of(cell), "blank": TB.blank_of(cell)}
    srcs.update({n: (FIXTURES / f"{n}.py").read_text() for n in FAILS})
    for name, res in on_the_hub(LAB, srcs, tmp_path).items():
        TB.assert_graded(name, buildit.grade(res), FAILS)
