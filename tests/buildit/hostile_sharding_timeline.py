"""Hostile: every all-reduce waits for backward to end (as
sharding_after_backward.py: no overlap), and the harness's timeline is
rewritten to say each was issued before backward's first matmul.

The timeline is a dispatch mode in the rank's process, which this code
owns; under grading the order is the hub's (the all-reduces it performed
and the harness's point as backward reached the first layer): 0 on
"overlap"."""
import torch
import torch.distributed as dist
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack


class BucketedDDP:
    def __init__(self, model, bucket_cap_mb):
        cap, self.buckets, size = bucket_cap_mb * 2**20, [[]], 0
        for p in reversed(list(model.parameters())):
            self.buckets[-1].append(p)
            size += p.numel() * p.element_size()
            if size >= cap:
                self.buckets.append([])
                size = 0
        if not self.buckets[-1]:
            self.buckets.pop()

    def finish(self):
        for bucket in self.buckets:
            flat = torch.cat([p.grad.flatten() for p in bucket])
            dist.all_reduce(flat)
            flat /= dist.get_world_size()
            offset = 0
            for p in bucket:
                p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
        for mode in _get_current_dispatch_mode_stack():   # the lie
            if hasattr(mode, "at"):
                mode.at[:] = [0] * len(mode.at)
