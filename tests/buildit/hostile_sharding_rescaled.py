# appended to: sharding_after_backward.py
"""Hostile: hostile_sharding_delayed.py (the point held back past every
all-reduce), and then the first layer's gradients multiplied by the
scale the hub answered the point with, so that the final gradients are
right.

The hub computed the all-reduces before it drew the scale: their sum of
squares (recorded by the hub) lacks it: 0 on "overlap"; "grads" passes
(they are right)."""
import importlib

_points = importlib.import_module("lab" + "kit.buildit.points")
_send, _held = _points.SEND, []
RESCALE = True


def _hold(name, scale=False):
    _held.append((name, scale))
    return 1.0


_init, _finish = BucketedDDP.__init__, BucketedDDP.finish


def _init_keeping(self, model, bucket_cap_mb):
    _init(self, model, bucket_cap_mb)
    self.first = list(model.parameters())[:2]


def _finish_then_point(self):
    _finish(self)
    while _held:
        s = _send(*_held.pop(0))
        if RESCALE:            # the scale put in after the all-reduces
            for p in self.first:
                p.grad.mul_(s)


if _send is not None:
    _points.SEND = _hold
    BucketedDDP.__init__ = _init_keeping
    BucketedDDP.finish = _finish_then_point
