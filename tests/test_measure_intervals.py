"""Interval sets: union, intersection, difference, clipping."""
from labkit.measure.trace import intervals as I


def test_interval_algebra():
    assert I.union([(5, 7), (0, 2), (1, 3), (3, 4), (6, 6)]) == [
        (0, 4), (5, 7)]
    a, b = [(0, 10), (20, 30)], [(5, 25)]
    assert I.intersect(a, b) == [(5, 10), (20, 25)]
    assert I.subtract(a, b) == [(0, 5), (25, 30)]
    assert I.subtract([(0, 10)], [(2, 3), (4, 5), (9, 12)]) == [
        (0, 2), (3, 4), (5, 9)]
    assert I.clip(a, 8, 22) == [(8, 10), (20, 22)]
    assert I.total(a) == 20
