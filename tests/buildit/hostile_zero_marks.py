"""Hostile: the right collectives for the count, but the all-reduce that
does the work hidden between the hub's counting windows (it closes the
harness's window before it and opens it again after).

The hub sees a collective outside every window: 0."""
import torch
import torch.distributed as dist


def _mark(kind):
    pg = dist.distributed_c10d._get_default_group()
    if hasattr(pg, "mark"):
        pg.mark(kind)


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
        _mark("close")
        dist.all_reduce(grads)
        _mark("open")
        shard = torch.empty(self.shard)
        dist.reduce_scatter_tensor(shard, grads.clone())
        self.master.grad = grads[r * self.shard:(r + 1) * self.shard] / w
        self.adam.step()
        full = torch.empty(self.shard * w)
        dist.all_gather_into_tensor(full, self.master.detach())
        offset = 0
        for p in self.params:
            p.copy_(full[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
