# appended to: sharding_after_backward.py
"""Hostile: sharding_after_backward.py's buckets (every all-reduce waits for
backward to end: no overlap), and after finish() the harness's timeline is
rewritten to say each was issued before backward's first matmul.

The timeline is a dispatch mode in the rank's process, which this code
owns; under grading the order is the hub's (the all-reduces it performed
and the harness's point as backward reached the first layer): 0 on
"overlap"."""
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

_finish = BucketedDDP.finish


def _lying_finish(self):
    _finish(self)
    for mode in _get_current_dispatch_mode_stack():       # the lie
        if hasattr(mode, "at"):
            mode.at[:] = [0] * len(mode.at)


BucketedDDP.finish = _lying_finish
