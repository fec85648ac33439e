"""labkit/buildit/fsdp_peak.py: the probe's points, what a FULL_SHARD rank
may hold at each, and the hub's record read back (plain data, no ranks)."""
import pytest

from labkit.buildit import fsdp, fsdp_peak

CFG = {**fsdp.CONFIG, **fsdp.HIDDEN}
N_UNITS = len(CFG["probe"]["sizes"]) - 1


def test_the_points_and_the_all_gathers_before_each():
    assert fsdp_peak.names(2) == [fsdp_peak.BASE, "forward 0", "forward 1",
                                  "backward 1", "backward 0"]
    assert fsdp_peak.gathers_before(2) == [1, 2, 3, 4]


def test_allowed_is_shards_one_unit_its_prefetch_and_gradient_shards():
    pads = fsdp.padded(CFG["probe"]["sizes"], 2)
    top = 4 * sum(pads) // 2 + fsdp.bound(CFG["probe"]["sizes"], 2) + \
        fsdp_peak.RSS_NOISE
    most = fsdp_peak.allowed(CFG, 2)
    assert most[:N_UNITS] == [top] * N_UNITS
    assert most[-1] == top + 4 * sum(pads[1:]) // 2     # backward 0
    # a unit never freed is more than the count's noise over the bound
    assert 4 * pads[0] > 3 * fsdp_peak.RSS_NOISE


def record(window=5, shift=0):
    """A FULL_SHARD rank's points and window (as the hub records them)."""
    n, calls = N_UNITS, []
    pts = [[fsdp_peak.BASE, window - 1, -1, 1000]]
    need = fsdp_peak.gathers_before(n)
    for k, name in enumerate(fsdp_peak.names(n)[1:]):
        while sum(c[0] == "all_gather" for c in calls) < need[k]:
            calls.append(["all_gather", 8])
        pts.append([name, window + 1, len(calls) - shift, 1000 + k])
    return calls, pts


def test_peaks_reads_the_growth_since_the_first_point():
    calls, pts = record()
    got = fsdp_peak.peaks(CFG, 2, 5, calls, pts)
    assert [g[1] for g in got] == list(range(2 * N_UNITS))
    assert [g[2] for g in got] == fsdp_peak.allowed(CFG, 2)


@pytest.mark.parametrize("spoil, why", [
    (lambda c, p: p.pop(3), "not the harness's"),
    (lambda c, p: p.insert(2, list(p[2])), "not the harness's"),
    (lambda c, p: p[0].__setitem__(1, 5), "came after the model"),
    (lambda c, p: p[4].__setitem__(3, -1), "no memory count"),
    (lambda c, p: p[4].__setitem__(1, 7), "outside the probe's window"),
    (lambda c, p: p[2].__setitem__(2, 1), "after 1 all-gathers")])
def test_peaks_refuses_points_out_of_place(spoil, why):
    calls, pts = record()
    spoil(calls, pts)
    with pytest.raises(ValueError, match=why):
        fsdp_peak.peaks(CFG, 2, 5, calls, pts)


def test_check_peak_rss_passes_within_and_fails_over():
    ok = {"config": CFG, "hub": {"base": [100, 100]}, "ranks": [
        {"peak_rss": [["forward 0", 10, 20]], "probe_rss": 100}] * 2}
    assert fsdp.check_peak(ok)[0]
    over = {**ok, "ranks": [{**ok["ranks"][0],
                             "peak_rss": [["forward 3", 30, 20]]}] * 2}
    passed, measured, _, why = fsdp.check_peak(over)
    assert not passed and "forward 3" in why and "10 more" in why
    said = {**ok, "ranks": [{"peak_rss": "a reason"}, ok["ranks"][0]]}
    assert fsdp.check_peak(said)[3] == "a reason"


def test_memory_held_before_the_probe_fails_peak():
    """issue 49 (2): a block held at the probe's first point since before
    the student's code (tests/buildit/hostile_fsdp_ballast.py), beyond
    the probe's batch and the noise, could be freed before the units'
    points: "peak" fails with why, however small the growth."""
    from labkit.buildit import held
    s = CFG["probe"]["sizes"]
    batch = 4 * CFG["batch"] * (s[0] + s[-1])
    for extra, ok in ((held.NOISE, True), (held.NOISE + 1, False)):
        got = {"config": CFG, "hub": {"base": [100, 100]}, "ranks": [
            {"peak_rss": [["forward 0", 10, 20]],
             "probe_rss": 100 + batch + extra}] * 2}
        passed, _, _, why = fsdp.check_peak(got)
        assert passed is ok
    assert "as the grader's memory probe began" in why
