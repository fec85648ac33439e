"""Hostile: ZeRO-2's collectives (each gradient reduce-scattered in
backward, as the key does) but no gradient ever freed, and the harness's
hook that measures the live gradients dropped, so that the rank records
a peak of 0.

The hub counts Phi of reduce-scatter in backward (the first half of
"freed"); on ranks that measure themselves the forged peak scores the
second. Under grading the hub reads each rank's memory from outside: over
the probe's backward it grows by every gradient (8.4 MB): 0 on "freed"."""
import torch
import torch.distributed as dist

_register = torch.Tensor.register_post_accumulate_grad_hook


class ShardedAdam:
    def __init__(self, params, lr):
        self.params = list(params)
        w, r = dist.get_world_size(), dist.get_rank()
        self.world = w
        self.chunk = [-(-p.numel() // w) for p in self.params]
        self.offset = [sum(self.chunk[:i]) for i in range(len(self.params))]
        mine = [self.padded(p.detach(), c).chunk(w)[r]
                for p, c in zip(self.params, self.chunk)]
        self.master = torch.nn.Parameter(torch.cat(mine))
        self.master.grad = torch.zeros_like(self.master)
        self.adam = torch.optim.Adam([self.master], lr=lr)
        torch.Tensor.register_post_accumulate_grad_hook = _register
        for i, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(
                lambda p, i=i: self.reduce(i, p))
        # every hook registered after this (the harness's) is dropped
        torch.Tensor.register_post_accumulate_grad_hook = \
            lambda self, hook: None

    def padded(self, t, chunk):
        out = torch.zeros(chunk * self.world)
        out[:t.numel()] = t.flatten()
        return out

    @torch.no_grad()
    def reduce(self, i, p):
        c, o = self.chunk[i], self.offset[i]
        shard = torch.empty(c)
        dist.reduce_scatter_tensor(shard, self.padded(p.grad, c))
        self.master.grad[o:o + c] = shard / self.world
        # p.grad is kept: the whole gradient lives until zero_grad

    @torch.no_grad()
    def step(self):
        self.adam.step()
        for i, p in enumerate(self.params):
            c, o = self.chunk[i], self.offset[i]
            full = torch.empty(c * self.world)
            dist.all_gather_into_tensor(full, self.master[o:o + c])
            p.copy_(full[:p.numel()].view_as(p))
