"""labkit/buildit/points.py: a point is a no-op without the grader's hub,
goes to the hub's ``SEND`` under grading, and only the hub's record's own
shape is read back."""
import pytest

from labkit.buildit import points


def test_a_point_does_nothing_without_a_hub(monkeypatch):
    monkeypatch.setattr(points, "SEND", None)
    points.mark("anything")                  # no hub: nothing to call


def test_a_point_goes_to_the_hub_cut_to_its_name_length(monkeypatch):
    sent = []
    monkeypatch.setattr(points, "SEND", sent.append)
    points.mark("x" * 100)
    points.mark(7)
    assert sent == ["x" * points.NAME_CHARS, "7"]


def test_of_hub_reads_one_list_of_points_per_rank():
    ranks = [{}, {}]
    pts = [[["a", 1, 2, 3]], []]
    assert points.of_hub({"ranks": ranks, "hub": {"points": pts}}) == pts


@pytest.mark.parametrize("hub", [
    None, {}, {"points": [[]]},               # no record, or one rank's
    {"points": [[["a", 1, 2]], []]},          # a short point
    {"points": [[[1, 1, 2, 3]], []]},         # a name that is no string
    {"points": [[["a", 1.0, 2, 3]], []]},     # a count that is no int
    {"points": [[["a", True, 2, 3]], []]}])   # ... nor a bool
def test_of_hub_refuses_a_record_of_another_shape(hub):
    with pytest.raises(ValueError):
        points.of_hub({"ranks": [{}, {}], "hub": hub})
