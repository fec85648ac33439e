"""Wrong: reduce-scatter and step the shard, but never all-gather.

Each rank's model keeps its own shard fresh and every other shard stale:
the ranks drift apart."""
import torch
import torch.distributed as dist


class ShardedAdam:
    def __init__(self, params, lr):
        self.params = list(params)
        w = dist.get_world_size()
        n = sum(p.numel() for p in self.params)
        self.shard, self.n = -(-n // w), n
        flat = torch.zeros(self.shard * w)
        flat[:n] = torch.cat([p.detach().flatten() for p in self.params])
        r = dist.get_rank()
        self.master = torch.nn.Parameter(
            flat[r * self.shard:(r + 1) * self.shard].clone())
        self.adam = torch.optim.Adam([self.master], lr=lr)

    @torch.no_grad()
    def step(self):
        w, r = dist.get_world_size(), dist.get_rank()
        grads = torch.zeros(self.shard * w)
        grads[:self.n] = torch.cat([p.grad.flatten() for p in self.params])
        shard = torch.empty(self.shard)
        dist.reduce_scatter_tensor(shard, grads)
        self.master.grad = shard / w
        self.adam.step()
        full = torch.zeros(self.shard * w)
        full[:self.n] = torch.cat([p.flatten() for p in self.params])
        full[r * self.shard:(r + 1) * self.shard] = self.master
        offset = 0
        for p in self.params:
            p.copy_(full[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
