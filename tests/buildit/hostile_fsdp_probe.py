"""Hostile: never frees a gathered unit (as fsdp_no_free.py), and the
harness's probe is rewritten to forget what it saw, so its samples say a
few kilobytes alive at every unit.

The probe weighs storages in the rank's process, which this code owns;
under grading the peak is the hub's count of the rank's memory at each
of the harness's points (buildit/fsdp_peak.py): 0 on "peak"."""
import importlib

import torch
import torch.distributed as dist

# (past the grader's check for the course's package in the source)
fsdp_units = importlib.import_module("lab" + "kit.buildit.fsdp_units")

_sample = fsdp_units.Probe.sample


def _forgetful(self, where):
    self.seen = []                   # nothing tracked: nothing alive
    _sample(self, where)             # (the harness's point still goes)
    self.samples[-1][1] = 4096       # the lie: a plausible few kB


fsdp_units.Probe.sample = _forgetful


class FSDP:
    """FULL_SHARD's collectives, but the gathered units stay alive."""

    def __init__(self, units, lr):
        self.units, self.lr = units, lr
        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        self.shards, self.grads, self.kept = [], [], []
        self.shapes = [[p.shape for p in u.parameters()] for u in units]
        self.ready = [0] * len(units)
        for i, u in enumerate(units):
            flat = self._padded([p.detach() for p in u.parameters()])
            self.shards.append(flat.chunk(self.world)[self.rank].clone())
            self.grads.append(None)
            u.register_forward_pre_hook(lambda m, a, i=i: self._gather(i))
            u.register_forward_hook(
                lambda m, a, out, i=i: self._after_forward(i, out))
            for p in u.parameters():
                p.register_post_accumulate_grad_hook(
                    lambda p, i=i: self._after_backward(i))

    def _padded(self, ts):
        flat = torch.cat([t.flatten() for t in ts])
        return torch.cat([flat, flat.new_zeros(-len(flat) % self.world)])

    def _gather(self, i):
        full = self.shards[i].new_empty(self.world * len(self.shards[i]))
        dist.all_gather_into_tensor(full, self.shards[i])
        self.kept.append(full)                       # never freed
        offset = 0
        for p, shape in zip(self.units[i].parameters(), self.shapes[i]):
            p.data = full[offset:offset + shape.numel()].view(shape)
            offset += shape.numel()

    def _after_forward(self, i, out):
        out.register_hook(lambda g: self._gather(i))  # again for backward

    def _after_backward(self, i):
        ps = list(self.units[i].parameters())
        self.ready[i] += 1
        if self.ready[i] < len(ps):
            return
        self.ready[i] = 0
        grad = torch.empty_like(self.shards[i])
        dist.reduce_scatter_tensor(grad, self._padded([p.grad for p in ps]))
        self.grads[i] = grad / self.world
        for p in ps:
            p.grad = None

    def step(self):
        with torch.no_grad():
            for shard, grad in zip(self.shards, self.grads):
                shard -= self.lr * grad
