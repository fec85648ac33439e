"""labkit.buildit.counted: the grader's hub counts replace the ranks' own;
a rank that talked outside the harness's windows, opened other windows or
used the network gets an error (0), on plain data."""
from labkit import buildit
from labkit.buildit import counted

RS, AG = "reduce_scatter", "all_gather"


def zero_result(windows, outside=None, loopback=0):
    h = buildit.harness("zero")
    cfg = {**h.CONFIG, **h.HIDDEN}
    rank = {"bytes_per_step": [{RS: 1, AG: 1}] * cfg["steps"]}
    return h, {"lab": "zero", "config": cfg, "error": None,
               "ranks": [rank, rank], "loopback_bytes": loopback,
               "hub": {"windows": windows, "outside": outside or [{}, {}],
                       "wire_bytes": 0}}


def steps(calls, n=None):
    h = buildit.harness("zero")
    n = n or h.HIDDEN["steps"]
    # the constructor's window, then backward's and step()'s per step,
    # then the memory probe's (before, constructor, 2 a step, after)
    probe = 2 * h.HIDDEN["probe"]["steps"] + 3
    return [[]] + [w for _ in range(n) for w in (list(calls), [])] + \
        [[] for _ in range(probe)]


def test_the_hubs_windows_replace_what_the_ranks_said():
    h, res = zero_result([steps([[AG, 8, "float32"], [RS, 4, "float32"],
                                 [RS, 4, "float32"]])] * 2)
    out, err = counted.apply(h, res)
    assert err is None
    assert out["ranks"][0]["bytes_per_step"][0] == {AG: 8, RS: 8}
    assert res["ranks"][0]["bytes_per_step"][0] == {RS: 1, AG: 1}


def test_a_collective_outside_the_windows_is_an_error():
    h, res = zero_result([steps([])] * 2, [{}, {"all_reduce": 64}])
    assert "rank 1 sent collectives outside" in counted.apply(h, res)[1]
    assert buildit.score(res)[0] == 0


def test_other_windows_than_the_harness_opens_are_an_error():
    h, res = zero_result([steps([], n=1)] * 2)
    assert "does not fit this part's steps" in counted.apply(h, res)[1]


def test_traffic_on_the_network_is_an_error():
    h, res = zero_result([steps([])] * 2, loopback=1 << 20)
    assert "over the network" in counted.apply(h, res)[1]


def test_without_a_hub_the_result_is_as_it_was():
    h, res = zero_result([])
    del res["hub"]
    assert counted.apply(h, res) == (res, None)

