"""labkit.buildit.experts (lab 13's build-it), graded on real gloo runs:
the answer key from the otter master scores full marks, the blank 0, the
wrong implementations of tests/buildit/moe_*.py their partial scores;
each rank's dealt share is its experts, tokens and routes, and the rows
the comm check expects are the checker's routes."""
import pytest
import torch

from labkit import buildit
from labkit.buildit import dealt, experts
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


def test_moe_shares_are_each_rank_s_experts_tokens_and_routes():
    h = experts
    w = buildit.hidden_world("experts")
    cfg = {**h.CONFIG, **h.HIDDEN, "data_seed": 12345}
    every, xs, dys, routes = h._setup(cfg, w)
    per = cfg["experts"] // w
    for r in range(w):
        got = h.share(cfg, w, r)
        mine = [p for j in range(r * per, (r + 1) * per)
                for p in every[j].parameters()]
        assert len(got) == len(mine) + 5
        assert all(torch.equal(a, b) for a, b in zip(got, mine))
        gate, idx, keep = routes[r]
        for a, b in zip(got[-5:], [xs[r], dys[r], gate, idx, keep]):
            assert torch.equal(a, b.float())
    assert dealt.flat_share(h.share, cfg, w, 0).dtype == torch.float32
    own = h.share({**h.CONFIG, **h.HIDDEN}, w, 1)
    assert not torch.equal(own[-5], h.share(cfg, w, 1)[-5])


def test_the_comm_check_reads_the_checker_s_routes():
    """The rows each rank sends and receives come from the reference's
    routes (a rank no longer reports them)."""
    h = experts
    cfg = {**h.CONFIG, **h.HIDDEN, "data_seed": 12345}
    w = buildit.hidden_world("experts")
    rows = h.rows(cfg, w)
    per = cfg["experts"] // w
    routes = h.reference(cfg, w)[2]
    assert sum(s for s, _ in rows) == sum(r for _, r in rows) == \
        sum(int(k.sum()) for _, _, k in routes)
    assert rows[0][1] == sum(int((k & (i // per == 0)).sum())
                             for _, i, k in routes)
