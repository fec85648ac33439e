"""labkit.buildit.zero_state: what a ZeRO optimizer keeps, read from the
grader's memory count under the hub (never the ranks' own word), and
bounded so that ZeRO-2 at N = 4 passes and full Adam fails; on plain
data (tests/test_grading_ranks.py runs it on forked ranks)."""
from labkit import buildit
from labkit.buildit import counted, zero_state
from labkit.buildit.sharding import numels
from test_buildit_counted import steps, zero_result


def course(res) -> int:
    """What the probe's own model and data hold (``course_bytes``)."""
    return zero_state.course_bytes(res["config"])


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
        res["hub"]["base"] = [rss[before] - course(res)] * 2
        out, err = counted.apply(h, res)
        assert err is None
        assert [r["state_rss"] for r in out["ranks"]] == [grew, grew]
        assert zero_state.check_state(out)[0] is ok
    res["hub"]["rss"] = [rss[:-1], rss]          # a window without a count
    assert "no memory count" in counted.apply(h, res)[1]
    del res["hub"]["rss"]                        # no count: no state
    out, err = counted.apply(h, res)
    assert not zero_state.check_state(out)[0]


def test_probe_counts_reads_the_probe_s_windows():
    h = buildit.harness("zero")
    steps, ps = h.HIDDEN["steps"], h.HIDDEN["probe"]["steps"]
    base = 2 * steps + 1
    rss = [100] * (base + 2 * ps + 3)
    rss[base + 2], rss[base + 3] = 100, 150     # step 1: backward grew 50
    rss[base + 4], rss[base + 5] = 150, 160     # step 2: 10
    rss[-1] = 170
    assert zero_state.probe_counts(rss, steps, ps) == {
        "state_rss": 70, "grads_rss_per_step": [50, 10],
        "probe_rss": 100, "freed_rss_per_step": [-70, -20]}


def test_freed_reads_the_hubs_count_of_backward_under_the_hub():
    h, res = zero_result([steps([["reduce_scatter", 1 << 30, "float32"]])]
                         * 2)
    cfg = res["config"]
    phi = 4 * sum(numels(cfg["probe"]["sizes"]))
    w = len(steps([]))
    base = 2 * cfg["steps"] + 1
    for grew, ok in ((phi, False), (phi // 8, True)):
        rss = [300 << 20] * w
        rss[base + 3] = rss[base + 2] + grew
        res["hub"]["rss"] = [rss, rss]
        res["hub"]["base"] = [rss[base] - course(res)] * 2
        res["ranks"] = [{"grad_peak_per_step": [0], "grads_rss_per_step":
                         [0]}] * 2                    # their word: unread
        out, err = counted.apply(h, res)
        assert err is None
        from labkit.buildit import zero
        assert zero.check_freed(out)[0] is ok, zero.check_freed(out)


def test_memory_held_before_the_probe_is_staging():
    """issue 49 (2): a block held since before the probe (allocated at
    import, tests/buildit/hostile_zero_ballast.py) could be freed between
    the hub's readings, so that full Adam's growth looks like ZeRO's: a
    rank that holds more than the probe's own model and data and the
    noise over the hub's reading before the student's code fails "state"
    and "freed" with why, whatever its growth."""
    from labkit.buildit import held, zero
    h, res = zero_result([steps([["reduce_scatter", 1 << 30, "float32"]])]
                         * 2)
    cfg = res["config"]
    base = 2 * cfg["steps"] + 1
    low, _ = zero_state.rss_bounds(cfg, 2)
    rss = [300 << 20] * len(steps([]))
    rss[-1] = rss[base] + low                    # a ZeRO-like growth
    res["hub"]["rss"] = [rss, rss]
    for extra, ok in ((held.NOISE, True), (held.NOISE + 1, False)):
        res["hub"]["base"] = [rss[base] - course(res) - extra] * 2
        out, err = counted.apply(h, res)
        assert err is None
        assert zero_state.check_state(out)[0] is ok
        assert zero.check_freed(out)[0] is ok
        if not ok:
            assert "as the grader's memory probe began" in \
                zero_state.check_state(out)[3]
    res["hub"]["base"] = [-1, -1]                # never read: no state
    out, _ = counted.apply(h, res)
    assert "before your code was imported" in zero_state.check_state(out)[3]


def test_memory_a_backward_frees_that_the_end_lacks_is_staging():
    """issue 49 (2): a block alive as a backward begins and freed in it
    (tests/buildit/hostile_zero_hook_ballast.py: by the first gradient
    hook) hides gradients that outlive backward; what a rank holds as a
    backward begins is at most what it keeps after the last step (ZeRO's
    state only grows)."""
    from labkit.buildit import zero
    h, res = zero_result([steps([["reduce_scatter", 1 << 30, "float32"]])]
                         * 2)
    cfg = res["config"]
    base = 2 * cfg["steps"] + 1
    rss = [300 << 20] * len(steps([]))
    res["hub"]["base"] = [rss[base] - course(res)] * 2
    for block, ok in ((1 << 20, True), ((1 << 20) + 4096, False)):
        rss[base + 2] = rss[-1] + block          # the first backward's
        res["hub"]["rss"] = [rss, rss]
        out, err = counted.apply(h, res)
        assert err is None
        assert zero.check_freed(out)[0] is ok, zero.check_freed(out)
    assert "as a backward pass began" in zero.check_freed(out)[3]


def test_memory_a_backward_holds_beyond_its_point_is_kept_gradients():
    """issue 49 (2), at N = 4: a block kept as state, freed in backward
    and allocated again in ``step()`` (tests/buildit/
    hostile_zero_state_ballast.py) hides gradients never freed inside
    the state's bound. The hub reads the rank at every call and as
    backward ends: from the probe's first reading, at most what that
    point may hold (the call's buffer, its shard, the gradients of the
    layer its tensor belongs to) and ``held_limit`` more."""
    from labkit.buildit import zero
    h, res = zero_result([steps([["reduce_scatter", 1 << 30, "float32"]])]
                         * 4)
    res["ranks"] = res["ranks"] * 2
    res["hub"]["outside"] = [{}] * 4
    cfg = res["config"]
    n = numels(cfg["probe"]["sizes"])
    base = 2 * cfg["steps"] + 1
    limit = zero_state.held_limit(cfg, 4)
    wins = steps([["reduce_scatter", 1 << 30, "float32"]])
    size = 4 * 4 * -(-n[2] // 4)                # the middle layer's weight
    layer = 4 * (n[2] + n[3])
    for k in range(cfg["probe"]["steps"]):
        wins[base + 2 + 2 * k] = [["reduce_scatter", size, "float32"]]
    rss = [300 << 20] * len(wins)
    res["hub"]["base"] = [rss[base] - course(res)] * 4
    res["hub"]["windows"] = [wins] * 4
    res["hub"]["rss"] = [rss] * 4
    for at_call, at_end, ok in (
            (limit + size + size // 4 + layer, 0, True),
            (limit + size + size // 4 + layer + 1, 0, False),
            (0, limit, True), (0, limit + 1, False)):
        calls = [[] for _ in wins]
        for k in range(cfg["probe"]["steps"]):
            calls[base + 2 + 2 * k] = [rss[base] + at_call]
        # held since the constructor: no growth over backward
        end = rss[:base + 1] + [rss[base] + at_end] * (len(rss) - base - 1)
        res["hub"]["rss"] = [end] * 4
        res["hub"]["call_rss"] = [calls] * 4
        out, err = counted.apply(h, res)
        assert err is None, err
        assert zero.check_freed(out)[0] is ok, zero.check_freed(out)
    assert "during a backward pass" in zero.check_freed(out)[3]
    res["hub"]["call_rss"] = [calls[:-1]] * 4        # a window unread
    assert "memory count" in counted.apply(h, res)[1]
