# appended to: sharding_after_backward.py
"""Hostile: sharding_after_backward.py's buckets (every all-reduce waits for
backward to end: no overlap), and the harness's point as backward reaches
the first layer held back until after finish(), so that the hub sees
every all-reduce before it (reaching the harness as "lab" + "kit").

Before the point's answer carried the hub's weights this scored
"overlap"; now the first layer's gradient lacks the weights of its rows
the hub drew as the point arrived (the harness asks the hub for them
there): 0 on "overlap" (and on "grads": its first layer is off by
them)."""
import importlib

_points = importlib.import_module("lab" + "kit.buildit.points")
_send, _held = _points.SEND, []
RESCALE = False


def _hold(name, *rows):
    _held.append((name, *rows))
    return [1.0] * rows[0] if rows else None


_init, _finish = BucketedDDP.__init__, BucketedDDP.finish


def _init_keeping(self, model, bucket_cap_mb):
    _init(self, model, bucket_cap_mb)
    self.first = list(model.parameters())[:2]


def _finish_then_point(self):
    _finish(self)
    while _held:
        s = _send(*_held.pop(0))
        if RESCALE and s:      # the weights put in after the all-reduces
            for p in self.first:
                p.grad.mul_(sum(s) / len(s))      # the best one number


if _send is not None:
    _points.SEND = _hold
    BucketedDDP.__init__ = _init_keeping
    BucketedDDP.finish = _finish_then_point
