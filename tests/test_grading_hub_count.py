"""scripts/grading/hub_count.py: the hub's count of a rank, plain data:
calls inside the rank's windows, the rest outside, nested windows as one,
and each point where it fell (no ranks: the rank side is
tests/test_grading_points.py)."""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from grading.hub_count import MAX_POINTS, NAME_CHARS, Count  # noqa: E402


def test_calls_in_windows_and_outside_them():
    c = Count(2)
    c.call(0, "all_reduce", 8, "float32")        # before any window
    c.call(0, "barrier", 0, "float32")           # not counted outside
    c.mark(0, "open")
    c.mark(0, "open")                            # nested: the same window
    c.call(0, "all_gather", 16, "float32")
    c.mark(0, "close")
    c.call(0, "send", 4, "float32", 1, [0.0, 1.0])
    c.mark(0, "close")
    c.mark(0, "close")                           # one too many: ignored
    rec = c.record()
    assert rec["windows"] == [[[["all_gather", 16, "float32"],
                                ["send", 4, "float32", 1, [0.0, 1.0]]]], []]
    assert rec["outside"] == [{"all_reduce": 8}, {}]
    assert "rss" not in rec                      # no pids: no memory read


def test_a_point_is_where_it_fell_and_the_memory_then():
    c = Count(1, pids=[os.getpid()])
    c.mark(0, "point", "before")
    c.mark(0, "open")
    c.call(0, "all_gather", 16, "float32")
    c.mark(0, "point", "x" * 100)
    rec = c.record()
    (a, b), = rec["points"]
    assert a[:3] == ["before", 0, -1] and b[:3] == ["x" * NAME_CHARS, 1, 1]
    assert a[3] > 0 and b[3] > 0 and len(rec["rss"][0]) == 1
    # and its memory at each call of a window, as the hub performs it
    assert [len(w) for w in rec["call_rss"][0]] == [1] and \
        rec["call_rss"][0][0][0] > 0


def test_points_past_the_most_are_dropped():
    c = Count(1)
    for k in range(MAX_POINTS + 5):
        c.mark(0, "point", str(k))
    assert len(c.record()["points"][0]) == MAX_POINTS
    assert c.record()["points"][0][0] == ["0", 0, -1, -1]


def test_weights_sums_of_squares_and_a_flood_of_points():
    """issue 49: a scaled point carries the hub's weights, one per row
    asked for (the same for every rank's k-th, none of them 1), an
    all-reduce's sum of squares is counted in its window, and points
    past MAX_POINTS are refused, not served."""
    import socket

    import torch
    from grading.hub import MAX_ROWS, Hub
    from grading.proxy import recv_frame
    from labkit.buildit.points import WEIGHTS
    pairs = [socket.socketpair() for _ in range(2)]
    hub = Hub([a for a, _ in pairs], 10.0)
    for r in range(2):
        hub._handle(r, {"op": "mark", "mark": "open"}, b"")
        hub._handle(r, {"op": "mark", "mark": "point", "name": "p",
                        "scale": True, "dtype": "float64",
                        "out_numel": 8}, b"")
    x = torch.tensor([3.0, 4.0])
    for r in range(2):
        hub._handle(r, {"op": "all_reduce", "reduce": "sum",
                        "dtype": "float32", "numel": [2], "out_numel": 2},
                    x.numpy().tobytes())
    got = [[recv_frame(b) for _ in range(3)] for _, b in pairs]
    drawn = [torch.frombuffer(bytearray(g[1][1]), dtype=torch.float64)
             .tolist() for g in got]
    assert drawn[0] == drawn[1] and len(drawn[0]) == 8 and \
        set(drawn[0]) <= set(WEIGHTS) and 1.0 not in WEIGHTS
    rec = hub.count.record()
    assert rec["points"][0][0][4] == drawn[0]
    assert rec["sumsq"] == [[100.0], [100.0]]      # (6, 8) summed
    hub._handle(0, {"op": "mark", "mark": "point", "name": "p",
                    "scale": True, "dtype": "float64",
                    "out_numel": MAX_ROWS + 1}, b"")   # too many: none
    h, _ = recv_frame(pairs[0][1])
    assert h.get("ok") and len(hub.count.points[0][-1]) == 4
    hub.count.points[0] = [["p", 0, 0, -1]] * MAX_POINTS
    hub._handle(0, {"op": "mark", "mark": "point", "name": "p"}, b"")
    h, _ = recv_frame(pairs[0][1])
    assert "more than" in h["error"] and \
        len(hub.count.points[0]) == MAX_POINTS


def test_the_memory_before_the_student_s_code_is_the_first_base():
    """``base``: the rank's memory at its first "base" mark (sent by the
    course's code before the student's module is imported,
    scripts/grading/ranks.py); a later one, the student's, changes
    nothing."""
    c = Count(1, pids=[os.getpid()])
    assert c.record()["base"] == [-1]
    c.mark(0, "base")
    first = c.record()["base"][0]
    block = bytearray(8 << 20)
    block[::4096] = b"x" * len(block[::4096])    # touched: in the count
    c.mark(0, "base")
    assert c.record()["base"] == [first] and first > 0
    del block
