"""The grader's hub reads what a harness measured in the rank's own process
(which imports the student's code) at the harness's points
(labkit/buildit/points.py): lab 3's overlap, the order of the all-reduces
and backward's last matmul; lab 3's FSDP peak, the rank's memory at each
unit. The answer key passes; a rank that rewrites the in-process measure
passes on its word and fails on the hub's; a rank without the points, or
with its own, fails."""
import pytest

from labkit import buildit
from test_grading_ranks import fixture, fresh_fork_ranks, master_key

pytestmark = pytest.mark.distributed


SHARDING = buildit.harness("sharding").HIDDEN


def sharding_source(name: str) -> str:
    if name == "key":
        return master_key("03_sharding", "class BucketedDDP")
    return fixture(name)


@pytest.mark.parametrize("name, overlap", [
    ("key", True), ("sharding_after_backward", False),
    ("hostile_sharding_timeline", False)])
def test_sharding_overlap_is_the_order_the_hub_saw(tmp_path, name, overlap):
    """Lab 3's "overlap" under grading: the all-reduces the hub performed
    before the harness's point as backward reached the first layer (one
    point per step, recorded by the hub). A rank that rewrites its own
    timeline (tests/buildit/hostile_sharding_timeline.py) passes on its
    word and fails on the hub's; the key passes both ways."""
    from labkit.buildit import points, sharding
    got = fresh_fork_ranks("sharding", sharding_source(name), SHARDING, 2,
                           tmp_path, 60, True)
    assert got["error"] is None, got["error"]
    steps = len(SHARDING["caps_bytes"]) * sharding.CONFIG["steps"]
    for per in points.of_hub(got):
        marks = [p for p in per if p[0] == sharding.LAST_MATMUL]
        assert len(marks) == steps and all(p[2] >= 0 for p in marks)
    rows = {r["check"]: r for r in buildit.grade({**got,
                                                  "loopback_bytes": 0})}
    assert rows["overlap"]["passed"] is overlap, rows["overlap"]
    assert rows["grads"]["passed"] and rows["buckets"]["passed"], rows
    own = sharding.check_overlap({k: v for k, v in got.items()
                                  if k != "hub"})[0]
    assert own is (name != "sharding_after_backward")


@pytest.mark.parametrize("name", [
    "hostile_sharding_delayed", "hostile_sharding_rescaled",
    "hostile_sharding_adaptive"])
def test_a_point_held_back_fails_overlap(tmp_path, name):
    """issue 49 (3): a rank that holds the harness's point back until its
    all-reduces are done (tests/buildit/hostile_sharding_delayed.py) shows
    the hub every all-reduce before the point, but its first layer's
    gradient lacks the weights of its rows the hub answered the point
    with; one that puts one number in afterwards
    (hostile_sharding_rescaled.py), or before the last bucket's
    all-reduce, once every other bucket's is done
    (hostile_sharding_adaptive.py: what one scale could not tell), has
    gradients off by the weights, and so had the all-reduces."""
    got = fresh_fork_ranks("sharding", sharding_source(name), SHARDING, 2,
                           tmp_path, 60, True)
    assert got["error"] is None, got["error"]
    rows = {r["check"]: r for r in buildit.grade({**got,
                                                  "loopback_bytes": 0})}
    assert rows["overlap"]["passed"] is False, rows["overlap"]
    assert "held back" in rows["overlap"]["reason"]
    assert not rows["grads"]["passed"], rows["grads"]
    assert rows["buckets"]["passed"], rows["buckets"]
    # every all-reduce but the last before the point, as the hub saw it:
    # the order alone passed it (what the weights are for)
    from labkit.buildit import counted
    out, err = counted.apply(buildit.harness("sharding"),
                             {**got, "loopback_bytes": 0})
    assert err is None
    if name == "hostile_sharding_adaptive":
        assert all(run["early"] == len(run["all_reduce_bytes"]) - 1
                   for r in out["ranks"] for run in r["runs"])


def test_a_run_without_its_points_is_an_error(tmp_path):
    """A rank that stops the harness's points (``points.SEND = None``)
    leaves the hub no order to read: an error, 0 on the lab."""
    source = sharding_source("key") + (
        "\nimport importlib\n"
        "importlib.import_module('lab' + 'kit.buildit.points').SEND = None\n")
    got = fresh_fork_ranks("sharding", source, SHARDING, 2, tmp_path, 60,
                           True)
    from labkit.buildit import counted
    _, err = counted.apply(buildit.harness("sharding"),
                           {**got, "loopback_bytes": 0})
    assert err and "marks of backward's last matmul" in err, err


FSDP = buildit.harness("fsdp").HIDDEN


def fsdp_source(name: str) -> str:
    if name == "key":
        return master_key("03_sharding", "class FSDP")
    return fixture(name)


@pytest.mark.parametrize("name, own, hub", [
    ("key", True, True), ("fsdp_no_free", False, False),
    ("fsdp_cached", False, False), ("fsdp_shard_grad_op", False, False),
    ("hostile_fsdp_probe", True, False),
    ("hostile_fsdp_ballast", False, False)])
def test_fsdp_peak_is_the_memory_the_hub_counted(tmp_path, name, own, hub):
    """Lab 3's FSDP "peak" under grading: the rank's memory at each of the
    probe's units, grown since before its model existed, within FULL_
    SHARD's shards, one unit and its prefetch (and gradient shards in
    backward). A rank that rewrites the in-process probe
    (tests/buildit/hostile_fsdp_probe.py) passes on its word and fails on
    the hub's; the key passes both ways; params and bytes stay as they
    were."""
    from labkit.buildit import fsdp, fsdp_peak
    got = fresh_fork_ranks("fsdp", fsdp_source(name), FSDP, 2, tmp_path, 60,
                           True)
    assert got["error"] is None, got["error"]
    got = {**got, "loopback_bytes": 0}
    rows = {r["check"]: r for r in buildit.grade(got)}
    assert rows["peak"]["passed"] is hub, rows["peak"]
    assert fsdp.check_peak({k: v for k, v in got.items()
                            if k != "hub"})[0] is own
    assert rows["params"]["passed"]
    assert rows["bytes"]["passed"] is (name != "fsdp_shard_grad_op")
    if name == "key":                 # a margin of 3 MiB at every unit
        from labkit.buildit import counted
        out, _ = counted.apply(buildit.harness("fsdp"), got)
        for r in out["ranks"]:
            assert [p[0] for p in r["peak_rss"]] == fsdp_peak.names(5)[1:]
            assert all(most - grew > 3 << 20
                       for _, grew, most in r["peak_rss"]), r["peak_rss"]
    elif name == "fsdp_shard_grad_op":    # no second all-gather
        assert "after 5 all-gathers" in rows["peak"]["reason"]
    elif name == "hostile_fsdp_ballast":  # issue 49 (2): staged
        from labkit.buildit import counted
        out, _ = counted.apply(buildit.harness("fsdp"), got)
        assert all(most >= grew for r in out["ranks"]   # growth alone
                   for _, grew, most in r["peak_rss"])  # would pass
        assert "as the grader's memory probe began" in \
            rows["peak"]["reason"]
    else:
        assert "the grader counted" in rows["peak"]["reason"]


def test_fsdp_peak_without_the_harness_s_points_fails(tmp_path):
    """A rank that stops the probe's points (its ``mark`` always False)
    leaves the hub no count at the units: 0 on "peak", with why."""
    source = fsdp_source("key") + (
        "\nimport importlib\n"
        "_u = importlib.import_module('lab' + 'kit.buildit.fsdp_units')\n"
        "_u.Probe.mark = property(lambda s: False, lambda s, v: None)\n")
    got = fresh_fork_ranks("fsdp", source, FSDP, 2, tmp_path, 60, True)
    rows = {r["check"]: r for r in buildit.grade({**got,
                                                  "loopback_bytes": 0})}
    assert not rows["peak"]["passed"]
    assert "points are not the harness's" in rows["peak"]["reason"]
    assert rows["params"]["passed"] and rows["bytes"]["passed"]


CP = buildit.harness("context_parallel").HIDDEN


@pytest.mark.parametrize("name, own, hub", [
    ("key", True, True), ("cp_blocking", False, False),
    ("hostile_cp_timeline", True, False)])
def test_cp_overlap_is_the_timeline_the_hub_recorded(tmp_path, name, own,
                                                     hub):
    """Lab 11's "overlap" under grading: from the points the harness's
    timeline marked at the hub as it went (a receive issued, a matmul
    while a block was pending, a block first read). A rank that rewrites
    the timeline's list at the end of each pass
    (tests/buildit/hostile_cp_timeline.py) passes on its word and fails
    on the hub's; for the others the two agree, receive by receive."""
    from labkit.buildit import context_parallel as C
    source = (master_key("11_context_parallel", "def ring_attention")
              if name == "key" else fixture(name))
    world = buildit.hidden_world("context_parallel")
    got = fresh_fork_ranks("context_parallel", source, CP, world, tmp_path,
                           60, True)
    assert got["error"] is None, got["error"]
    rows = {r["check"]: r for r in buildit.grade({**got,
                                                  "loopback_bytes": 0})}
    assert rows["overlap"]["passed"] is hub, rows["overlap"]
    assert all(rows[c]["passed"] for c in ("output", "grads", "bytes"))
    theirs = {k: v for k, v in got.items() if k != "hub"}
    assert C.check_overlap(theirs)[0] is own
    if own is hub:
        from labkit.buildit import counted
        out, err = counted.apply(buildit.harness("context_parallel"), got)
        assert err is None
        for mine, said in zip(out["ranks"], got["ranks"]):
            for phase in ("forward", "backward"):
                assert mine[phase]["overlap"] == said[phase]["overlap"]
