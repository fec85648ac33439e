"""labkit.buildit.zero_state: what a ZeRO optimizer keeps, read from the
grader's memory count under the hub (never the ranks' own word), and
bounded so that ZeRO-2 at N = 4 passes and full Adam fails; on plain
data (tests/test_grading_ranks.py runs it on forked ranks)."""
from labkit import buildit
from labkit.buildit import counted, zero_state
from labkit.buildit.sharding import numels
from test_buildit_counted import steps, zero_result


def test_the_bounds_part_zero2_from_full_adam_at_four_ranks():
    cfg = {**buildit.harness("zero").HIDDEN}
    n = sum(numels(cfg["probe"]["sizes"]))
    low, high = zero_state.rss_bounds(cfg, 4)
    zero2, full = 16 * n // 4, 8 * n       # moments, master, grad shard
    assert low < 8 * n // 4 < zero2 + (1 << 20) < high < full
    assert full - high > 2 << 20 and high - zero2 > 2 << 20


def test_the_state_is_the_hubs_memory_count_not_the_ranks_word():
    """Under the hub, ``state`` reads the growth of each rank's memory that
    the hub read from outside around the probe (``state_rss``); a rank's
    own ``state_rss`` or ``state_bytes`` are not read."""
    h, res = zero_result([steps([])] * 2)
    res["config"] = {**res["config"], "steps": h.HIDDEN["steps"]}
    res["ranks"] = [{**r, "state_bytes": 0, "state_rss": 0}
                    for r in res["ranks"]]
    w = len(steps([]))
    before = 2 * h.HIDDEN["steps"] + 1
    low, high = zero_state.rss_bounds(res["config"], 2)
    for grew, ok in ((high + 1, False), (low, True)):
        rss = [200 << 20] * w
        rss[-1] = rss[before] + grew
        res["hub"]["rss"] = [rss, rss]
        out, err = counted.apply(h, res)
        assert err is None
        assert [r["state_rss"] for r in out["ranks"]] == [grew, grew]
        assert zero_state.check_state(out)[0] is ok
    res["hub"]["rss"] = [rss[:-1], rss]          # a window without a count
    assert "no memory count" in counted.apply(h, res)[1]
    del res["hub"]["rss"]                        # no count: no state
    out, err = counted.apply(h, res)
    assert not zero_state.check_state(out)[0]
