"""labkit.buildit.experts (lab 13's build-it), graded on real gloo runs:
the answer key from the otter master scores full marks, the blank 0, the
wrong implementations of tests/buildit/moe_*.py their partial scores."""
import pytest

from labkit import buildit
from tests.test_buildit import FIXTURES, blank_of, json_only, key_of
import tests.test_buildit as TB

FAILS = {"moe_no_gate_weights": {"output", "grads"},
         "moe_no_unpermute": {"output", "grads"},
         "moe_all_gather": {"comm"}}


@pytest.mark.distributed
def test_key_full_blank_zero_wrong_partial(monkeypatch):
    monkeypatch.setitem(TB.MASTERS, "experts", "13_experts")
    cell = TB.solution_cell("experts")
    sources = {"key": key_of(cell), "blank": blank_of(cell)}
    assert "BEGIN SOLUTION" not in sources["blank"]
    sources.update({f.stem: f.read_text()
                    for f in sorted(FIXTURES.glob("moe_*.py"))})
    assert set(FAILS) <= set(sources)
    results = buildit.run("experts", sources=sources,
                          config=buildit.harness("experts").HIDDEN)
    for name, result in results.items():
        rows = buildit.grade(result)
        got, most = buildit.score(result)
        failed = {r["check"] for r in rows if not r["passed"]}
        want = {"key": set(), "blank": {r["check"] for r in rows}}.get(
            name, FAILS.get(name))
        assert failed == want, (name, rows)
        for r in rows:
            assert bool(r["reason"]) == (not r["passed"]), (name, r)
        assert got == most - sum(r["max"] for r in rows
                                 if r["check"] in want)
        json_only(result)
