# appended to: cp_blocking.py
"""Hostile: cp_blocking.py's ring (each block computed, then sent on and
waited for: nothing overlapped), and at the end of each pass the
harness's timeline is rewritten to say every receive was overlapped.

The timeline is a dispatch mode in the rank's process, which this code
owns; under grading the overlap is read from the points the timeline
marked at the hub as it went (buildit/context_parallel.py's from_hub),
which no later rewrite reaches: 0 on "overlap"."""
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack


def _overlapped():
    """The lie: every receive of this pass overlapped by one matmul."""
    for mode in _get_current_dispatch_mode_stack():
        if hasattr(mode, "overlap") and hasattr(mode, "pending"):
            mode.overlap[:] = [1] * (len(mode.overlap) + len(mode.pending))
            mode.pending.clear()


def _lying(run):
    def then_lie(ctx, *args):
        out = run(ctx, *args)
        _overlapped()
        return out
    return staticmethod(then_lie)


RingAttention.forward = _lying(RingAttention.forward)
RingAttention.backward = _lying(RingAttention.backward)
