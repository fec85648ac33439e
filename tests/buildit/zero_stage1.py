"""Wrong for ZeRO-2 (right for ZeRO-1): one reduce-scatter of the flat
gradients in step(), after backward.

Parameters, collectives and optimizer state are right, but every rank
holds the whole gradient (Phi) at the end of backward: ZeRO-2 frees each
gradient in backward as soon as it is reduced."""
import torch
import torch.distributed as dist


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
