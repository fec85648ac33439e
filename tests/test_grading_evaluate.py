"""scripts/grading/evaluate.py: the reason a failing check gets, and the
names a student cannot rebind. Nothing is launched: the build-it check
grades a made-up run (``buildit.verified`` is patched in the job's setup)."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from grading import channel, evaluate  # noqa: E402
from grading.plain import encode  # noqa: E402

MSG = "stage 0 of 4 ran F0 B0 F1 B1; 1F1B runs F0 F1 F2 F3 B0"


def test_one_line_is_the_checks_own_message():
    doctest_output = (
        "Failed example:\n    buildit.expect(build_result, 'pipeline_"
        "parallel', 'order')\nException raised:\n    Traceback (most recent "
        "call last):\n      File \"<doctest>\", line 1, in <module>\n    "
        "  raise KeyError('x')\n    KeyError: 'x'\n\nDuring handling ...\n"
        f"    AssertionError: {MSG}\n")
    assert evaluate.one_line(doctest_output) == MSG
    assert evaluate.one_line("RuntimeError: gloo\nValueError: bad size") \
        == "ValueError: bad size"
    assert evaluate.one_line("first\nsecond") == "first"
    assert evaluate.one_line("") == ""


def test_reason_of_each_kind():
    r = evaluate.reason
    assert r(AssertionError(MSG), "hidden", 2, "q4", {}) == MSG
    assert r(AssertionError(), "hidden", 2, "q4", {}) == \
        "hidden check 2 of q4 failed"
    # a hidden case's error gives its type only (its message may hold the
    # case's inputs); a public one's gives the message
    assert r(KeyError("ranks"), "hidden", 1, "q4", {}) == \
        "hidden check 1 of q4 failed: KeyError"
    assert r(KeyError("ranks"), "public", 1, "q4", {}) == \
        "public check 1 of q4 failed: KeyError: 'ranks'"
    assert r(NameError("x", name="x"), "public", 1, "q1", {"x": "odd"}) == \
        "`x` is odd"


def run_job(tmp_path, setup, tests, values) -> dict:
    (tmp_path / "job.json").write_text(json.dumps({"setup": setup,
                                                   "tests": tests}))
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'scripts'}:{ROOT}")
    env.pop("GRADING_JAILED", None)
    secret = channel.new_secret()
    r = subprocess.run([sys.executable, "-m", "grading.evaluate",
                        "job.json"], cwd=tmp_path, env=env, text=True,
                       input=json.dumps({"secret": secret}) + "\n"
                       + json.dumps({"values": values}) + "\n",
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr + (tmp_path / "evaluate.log").read_text()
    # every line is authenticated; the last is the result (after any calls)
    msgs = [channel.verify(secret, ln.encode())
            for ln in r.stdout.splitlines()]
    assert msgs and None not in msgs, r.stdout
    return msgs[-1]


def case(code: str, points, hidden=True) -> dict:
    return {"code": "".join(f">>> {ln}\n" for ln in code.splitlines()),
            "hidden": hidden, "locked": False, "points": points}


def test_build_it_check_reason_is_its_message(tmp_path):
    """A build-it question's hidden checks (master 06 q4) on a run whose
    stage 0 ran GPipe's order: the reasons are the checks' own messages."""
    from labkit.buildit import pipeline_parallel as pp
    from labkit.buildit.tensors import flat
    from labkit.predict.pipeline_parallel import rank_order
    p, m = 4, 6
    cfg = dict(pp.CONFIG, micro_batches=m)
    want = pp.reference(cfg, p)   # the right gradients, as a rank sends
    ranks = [{"events": [list(e) for e in rank_order(
        "gpipe" if r == 0 else "1f1b", p, m)[r]], "end": 2 * m + p - 1,
        "grads": [flat(g) for g in want[r]], "no_backward": []}
        for r in range(p)]
    result = {"lab": "pipeline_parallel", "config": cfg,
              "source": "def one_f_one_b(stage): ...", "error": None,
              "ranks": ranks}
    code = "from labkit import buildit\nbuildit.expect(build_result, " \
        "'pipeline_parallel', {!r})"
    test = {"name": "q4_build_it", "points": 4, "suites": [{"cases": [
        case(code.format("grads"), 2), case(code.format("order"), 1),
        case(code.format("nothing"), 1)], "scored": True, "setup": "",
        "teardown": "", "type": "doctest"}]}
    setup = ["from labkit import buildit\n"
             "buildit.verified = lambda result, lab: result  # no launch\n"]
    got = run_job(tmp_path, setup, [test],
                  {"build_result": {"value": encode(result)}})
    q = got["questions"]["q4_build_it"]
    assert q["points"] == 2 and q["max"] == 4
    assert q["reasons"][0].startswith("stage 0 of 4 ran F0 F1 F2 F3 F4 F5 "
                                      "B0"), q
    assert q["reasons"][1] == ("hidden check 3 of q4_build_it failed: "
                               "KeyError (your `build_result` is a dict of "
                               "5 entries)"), q
    assert not any("buildit.expect" in x for x in q["reasons"])


def test_student_cannot_rebind_builtins(tmp_path):
    """A student's ``abs`` (a function: it would be called across the wall)
    is not the ``abs`` the tests call; names the student alone defines
    are."""
    test = {"name": "q1", "points": 2, "suites": [{"cases": [
        case("assert abs(answer - 3) < 1, 'answer is not 3'", 1),
        case("assert double(2) == 4", 1)], "scored": True, "setup": "",
        "teardown": "", "type": "doctest"}]}
    got = run_job(tmp_path, [], [test], {
        "answer": {"value": 10}, "abs": {"function": True},
        "double": {"function": True}})
    q = got["questions"]["q1"]
    # `double` is called across the wall: no student answers here
    assert q["points"] == 0 and q["reasons"][0] == "answer is not 3", q
