"""Hostile: ZeRO-1 (as zero_stage1.py: one reduce-scatter in step(), every
gradient alive until then) that lies about its gradient peak: it stops the
harness from registering the hook that measures the live gradients, so
the rank records a peak of 0.

The peak is measured in the rank's process, which this code owns; the
grader's hub counts what it reduce-scattered during backward (nothing):
0 on "freed"."""
import torch
import torch.distributed as dist

# every hook registered after this module is imported (the harness's
# measuring hook among them) is dropped
torch.Tensor.register_post_accumulate_grad_hook = \
    lambda self, hook: None
class ShardedAdam:
    def __init__(self, params, lr):
        self.params = list(params)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        n = sum(p.numel() for p in self.params)
        self.shard = -(-n // self.world)
        self.padded = self.shard * self.world
        flat = torch.zeros(self.padded)
        flat[:n] = torch.cat([p.detach().flatten() for p in self.params])
        mine = flat[self.rank * self.shard:(self.rank + 1) * self.shard]
        self.master = torch.nn.Parameter(mine.clone())
        self.adam = torch.optim.Adam([self.master], lr=lr)

    @torch.no_grad()
    def step(self):
        grads = torch.zeros(self.padded)
        n = sum(p.numel() for p in self.params)
        grads[:n] = torch.cat([p.grad.flatten() for p in self.params])
        shard = torch.empty(self.shard)
        dist.reduce_scatter_tensor(shard, grads)
        self.master.grad = shard / self.world
        self.adam.step()
        full = torch.empty(self.padded)
        dist.all_gather_into_tensor(full, self.master.detach())
        offset = 0
        for p in self.params:
            p.copy_(full[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
