# appended to: sharding_after_backward.py
"""Hostile: sharding_after_backward.py's buckets (every all-reduce waits
for backward to end: no overlap), and the harness's point as backward
reaches the first layer held back, adaptively: once backward has ended,
every bucket but the last is all-reduced, then the point is sent, the
first layer's finished gradients are multiplied by the hub's answer (as
the point would have), and only then is the last bucket all-reduced
(reaching the harness as "lab" + "kit"; issue 49, 3).

A scale the hub answers with (one number) enters a finished gradient by
a product: so did this, and its all-reduces carried it; it scored
"overlap". The hub now answers with a weight per row of the batch,
which enters the first layer's gradient inside its matmul (a sum over
the rows): a finished gradient cannot take it, the best one number (the
weights' mean) leaves it off: 0 on "overlap"."""
import importlib

import torch

_points = importlib.import_module("lab" + "kit.buildit.points")
_send, _held = _points.SEND, []


def _hold(name, *scale):
    _held.append((name, *scale))
    if not scale:
        return None
    return [1.0] * scale[0] if type(scale[0]) is int else 1.0


def _finish_adaptive(self):
    n = dist.get_world_size()
    for i, bucket in enumerate(self.buckets):
        if i == len(self.buckets) - 1:      # the first layer's: point now
            while _held:
                s = _send(*_held.pop(0))
                f = s if type(s) is float else sum(s) / len(s)
                for p in self.first:
                    p.grad.mul_(f)
        flat = torch.cat([p.grad.flatten() for p in bucket])
        dist.all_reduce(flat)
        flat /= n
        offset = 0
        for p in bucket:
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()


if _send is not None:
    _points.SEND = _hold
    _Plain = BucketedDDP

    class BucketedDDP(_Plain):
        def __init__(self, model, bucket_cap_mb):
            _Plain.__init__(self, model, bucket_cap_mb)
            self.first = list(model.parameters())[:2]

        finish = _finish_adaptive
