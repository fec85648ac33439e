"""labkit.measure.schedules: a rank's record read back (pure Python)."""
import pytest

from labkit.measure import schedules as M


def _rec(rank, events, torch_order=None, chunks=1):
    ev = [{"kind": k, "stage": s, "chunk": c, "microbatch": mb,
           "start": t0, "end": t1, "saved": saved, "rank": rank}
          for k, s, c, mb, t0, t1, saved in events]
    return {"rank": rank, "schedules": {"x": {
        "events": ev, "torch_order": torch_order, "chunks": chunks}}}


# one rank of ZB-H1 with two micro-batches: W0 comes after I1
ZB = _rec(0, [("F", 0, 0, 0, 0.0, 1.0, 100), ("F", 0, 0, 1, 1.0, 2.0, 100),
              ("I", 0, 0, 0, 2.0, 3.0, 0), ("I", 0, 0, 1, 3.0, 4.0, 0),
              ("W", 0, 0, 0, 4.0, 5.0, 0), ("W", 0, 0, 1, 5.0, 6.0, 0)],
          torch_order=["0F0", "0F1", "0I0", "0I1", "0W0", "0W1"])


def test_order_and_torchs_order_read_alike():
    assert M.order(ZB, "x") == [("F", 0, 0), ("F", 1, 0), ("I", 0, 0),
                                ("I", 1, 0), ("W", 0, 0), ("W", 1, 0)]
    assert M.torch_order(ZB, "x") == M.order(ZB, "x")


def test_bytes_are_freed_by_w_not_by_i():
    assert M.held(ZB, "x") == 200
    full = _rec(0, [("F", 0, 0, 0, 0, 1, 100), ("B", 0, 0, 0, 1, 2, 0),
                    ("F", 0, 0, 1, 2, 3, 100), ("B", 0, 0, 1, 3, 4, 0)])
    assert M.held(full, "x") == 100
    assert M.peak_bytes([full, ZB], "x") == [100, 200]
    assert M.saved_per_forward([ZB], "x") == [100]


def test_bubble_and_times():
    # two ranks, each busy 6 of a span of 8: (2 * 8 - 12) / 12
    late = _rec(1, [(k, 1, 0, mb, t0 + 2, t1 + 2, s) for k, _, _, mb, t0,
                    t1, s in [(e["kind"], 0, 0, e["microbatch"], e["start"],
                               e["end"], e["saved"])
                              for e in ZB["schedules"]["x"]["events"]]])
    assert M.bubble([ZB, late], "x") == pytest.approx(4 / 12)
    assert M.op_times([ZB], "x") == {"F": 1.0, "I": 1.0, "W": 1.0}
    assert min(e["start"] for e in M.timeline([late], "x")) == 0
