"""The stalled rank is the one whose heartbeat is behind the others'."""
from labkit.measure.hang import (Heartbeat, describe_hang, orphans,
                                 stalled_ranks)


def test_stalled_rank_from_heartbeats(tmp_path):
    for r in (0, 2, 3):
        Heartbeat(tmp_path, r)("timed_out", 3, op="all_reduce", waited_s=2.0)
    Heartbeat(tmp_path, 1)("before", 3, op="sleep")
    assert stalled_ranks(tmp_path, 4) == [1]
    text = describe_hang(tmp_path, 4)
    assert "rank 1 never reached collective 3" in text and "2.0 s" in text


def test_a_rank_without_heartbeat_is_stalled(tmp_path):
    Heartbeat(tmp_path, 0)("enter", 0)
    assert stalled_ranks(tmp_path, 2) == [1]
    assert orphans(tmp_path) == []
