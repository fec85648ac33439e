"""Pipeline parallelism's build-it on the grader's hub: the schedule, its
slots and the micro-batches in flight come from the hub's record of the
stages' messages (labkit.buildit.pipeline_hub), not from the ranks.

On plain data: 1F1B's and GPipe's message records give their tables,
bubbles and in-flight counts. On forked ranks (scripts/grading/ranks.py,
``hub=True``): the key scores full marks, the blank 0, each wrong schedule
its expected points, and a rank that rewrites its own record of the
schedule (tests/buildit/hostile_pp_record.py) keeps GPipe's marks."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from labkit import buildit
from labkit.buildit import pipeline_hub
from labkit.predict.pipeline_parallel import idle_fraction, rank_order

ROOT = Path(__file__).resolve().parent.parent
LAB = "pipeline_parallel"
H = buildit.harness(LAB)
CFG = {**H.CONFIG, **H.HIDDEN}


def record(table: dict, p: int) -> list:
    """The hub's windows for stages that ran ``table`` through Stage."""
    wins = []
    for r in range(p):
        calls = []
        for kind, i, *_ in table[r]:
            tail = [float(i), 0.0]
            if kind == "F":
                if r > 0:
                    calls.append(["recv", 4, "float32", r - 1, tail])
                if r < p - 1:
                    calls.append(["send", 4, "float32", r + 1, tail])
            else:
                if r < p - 1:
                    calls.append(["recv", 4, "float32", r + 1, tail])
                if r > 0:
                    calls.append(["send", 4, "float32", r - 1, tail])
        wins.append([calls + [["barrier", 0, "float32"]]])
    return wins


def gpipe(p, m):
    return {r: [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
            for r in range(p)}


def test_the_hubs_record_of_1f1b_gives_its_table_and_bubble():
    p, m = 4, 5
    got = pipeline_hub.schedule(record(rank_order("1f1b", p, m), p), p)
    for r, s in enumerate(got):
        assert [e[:2] for e in s["events"]] == \
            [[k, i] for k, i, _ in rank_order("1f1b", p, m)[r]]
        assert s["in_flight"] == min(p - r, m)
        assert s["no_backward"] == []
    total = max(s["end"] for s in got)
    assert (total - 2 * m) / total == pytest.approx(
        idle_fraction("1f1b", p, m))


def test_gpipes_record_holds_every_micro_batch():
    p, m = 4, 5
    got = pipeline_hub.schedule(record(gpipe(p, m), p), p)
    assert [s["in_flight"] for s in got] == [m] * p


def test_a_collective_or_a_message_to_a_far_stage_is_an_error():
    wins = record(rank_order("1f1b", 4, 5), 4)
    wins[1][0].insert(0, ["all_reduce", 4, "float32"])
    with pytest.raises(ValueError, match="stage 1 made a all_reduce"):
        pipeline_hub.schedule(wins, 4)
    wins = record(rank_order("1f1b", 4, 5), 4)
    wins[0][0].insert(0, ["send", 4, "float32", 3, [0.0, 0.0]])
    with pytest.raises(ValueError, match="stage 0 did a send with stage 3"):
        pipeline_hub.schedule(wins, 4)


def test_a_rank_record_is_replaced_by_the_hubs():
    p, m = 4, CFG["micro_batches"]
    table = rank_order("1f1b", p, m)
    forged = {"events": [[k, i, 0.0] for k, i, _ in table[0]], "end": 99,
              "in_flight": 1, "no_backward": [], "grads": []}
    res = {"lab": LAB, "config": CFG, "error": None,
           "ranks": [forged] * p, "loopback_bytes": 0,
           "hub": {"windows": record(gpipe(p, m), p),
                   "outside": [{}] * p, "wire_bytes": 1 << 30}}
    rows = {r["check"]: r for r in buildit.grade(res)}
    assert not rows["in_flight"]["passed"]
    assert not rows["order"]["passed"]


# forked ranks on the hub (slow: one process runs every source in turn)
FIXTURES = ROOT / "tests" / "buildit"
FAILS = {"pp_gpipe": {"order", "in_flight"},
         "pp_warmup_p_minus_r": {"order", "in_flight"},
         "pp_sequential": {"order", "bubble"},
         "hostile_pp_record": {"order", "in_flight"}}


def sources() -> dict:
    sys.path.insert(0, str(ROOT / "tests"))
    from test_buildit import blank_of, key_of, solution_cell
    cell = solution_cell(LAB)
    out = {"key": key_of(cell), "blank": blank_of(cell)}
    out.update({n: (FIXTURES / f"{n}.py").read_text() for n in FAILS})
    return out


RUN_ALL = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from grading.ranks import fork_ranks
srcs, work = json.loads(sys.stdin.read()), Path(sys.argv[2])
cfg = json.loads(sys.argv[3])
out = {n: fork_ranks("pipeline_parallel", s, cfg, 4, work / n, 120,
                     hub=True) for n, s in srcs.items()}
print(json.dumps(out))
"""


@pytest.mark.distributed
def test_on_the_hub_key_full_blank_zero_wrong_and_hostile_partial(
        tmp_path):
    srcs = sources()
    from test_buildit import assert_graded   # on the path: sources()
    r = subprocess.run([sys.executable, "-c", RUN_ALL, str(ROOT /
                                                           "scripts"),
                        str(tmp_path), json.dumps(H.HIDDEN)],
                       input=json.dumps(srcs), capture_output=True,
                       text=True, timeout=900,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for name, res in got.items():
        res.update(lab=LAB, config=CFG, source=srcs[name],
                   loopback_bytes=0, wire_bytes=res["hub"]["wire_bytes"])
        assert_graded(name, buildit.grade(res), FAILS)
    # the hostile record would have passed on the ranks' own word
    own = dict(got["hostile_pp_record"])
    del own["hub"]
    assert buildit.score(own)[0] == 4
    assert buildit.score(got["hostile_pp_record"])[0] == 2
