"""labkit/buildit/dealt.py: a rank's share of a part's data. Without the
grader's hub a rank's own draw stands; with it the same shapes come back
filled by the hub; each harness's ``share`` is its rank's rows of the
whole draw, and the checker's reference reads the seed the data was
drawn from (the rerun's, under grading)."""
import json

import pytest
import torch

from labkit import buildit
from labkit.buildit import context_parallel, dealt, fsdp, sharding, zero

HARNESSES = {"sharding": sharding, "fsdp": fsdp, "zero": zero,
             "context_parallel": context_parallel}


def test_the_seed_is_the_grader_s_when_it_dealt(monkeypatch):
    assert dealt.seed({"seed": 4}) == 5
    assert dealt.seed({"seed": 4, "data_seed": 99}) == 99


def test_a_rank_s_own_draw_stands_without_a_hub(monkeypatch):
    monkeypatch.setattr(dealt, "DEAL", None)
    local = [torch.ones(2, 3)]
    assert dealt.mine(local) is local


def test_the_hub_fills_the_same_shapes(monkeypatch):
    monkeypatch.setattr(dealt, "DEAL",
                        lambda out: out.copy_(torch.arange(out.numel())))
    a, b = dealt.mine([torch.zeros(2, 3), torch.zeros(4)])
    assert a.shape == (2, 3) and b.tolist() == [6, 7, 8, 9]
    with pytest.raises(ValueError, match="float32"):
        dealt.mine([torch.zeros(2, dtype=torch.float64)])


@pytest.mark.parametrize("lab", sorted(HARNESSES))
def test_the_shares_are_the_ranks_rows_of_the_whole_draw(lab):
    h, w = HARNESSES[lab], buildit.hidden_world(lab)
    cfg = {**h.CONFIG, **h.HIDDEN, "data_seed": 12345}
    shares = [h.share(cfg, w, r) for r in range(w)]
    whole = (h.tensors(cfg, w) if lab == "context_parallel"
             else h.data(cfg, w))
    dim = {"sharding": 0, "fsdp": 1, "zero": 1, "context_parallel": -2}[lab]
    for k, t in enumerate(whole):
        assert torch.equal(torch.cat([s[k] for s in shares], dim), t)
    flat = dealt.flat_share(h.share, cfg, w, 1)
    assert flat.dtype == torch.float32 and torch.equal(
        flat, torch.cat([t.reshape(-1) for t in shares[1]]))
    # another seed, other numbers: a rank's own draw is not the dealt one
    own = h.share({**h.CONFIG, **h.HIDDEN}, w, 1)
    assert not torch.equal(own[0], shares[1][0])


@pytest.mark.parametrize("got, why", [
    ({"data_seed": 77}, None), ({}, "did not say which data it dealt"),
    ({"data_seed": "77"}, "did not say which data it dealt")])
def test_the_rerun_s_seed_reaches_the_reference(monkeypatch, got, why):
    """Under grading (``RERUN``) the config the checks read is the
    harness's own plus the seed the rerun dealt from; a rerun that does
    not say it is an error."""
    w = buildit.hidden_world("context_parallel")
    ranks = [{} for _ in range(w)]

    def rerun(lab, source):
        return {"lab": lab, "config": {"forged": 1}, "error": None,
                "source": source, "ranks": ranks, "wire_bytes": 0,
                "hub": {}, **got}
    monkeypatch.setattr(buildit, "RERUN", rerun)
    buildit._rerun.cache_clear()
    try:
        out = json.loads(buildit._rerun("context_parallel", "x = 1\n"))
    finally:
        buildit._rerun.cache_clear()
    h = context_parallel
    assert {k: v for k, v in out["config"].items() if k != "data_seed"} \
        == {**h.CONFIG, **h.HIDDEN}
    assert out["config"].get("data_seed") == (77 if why is None else None)
    if why is None:
        assert out["error"] is None
    else:
        assert why in out["error"]
