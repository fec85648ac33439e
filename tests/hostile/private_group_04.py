# lab: 04_zero
# base: student
# expect: 0
# issue 30 (item 2): the collectives that do the work on a gloo group of
# the ranks' own (a TCPStore on the jail's loopback), and the ones the
# count expects (Phi of reduce-scatter and of all-gather per step) on
# torch.distributed's group, for show. The grader's hub performs the
# ranks' group: it sees only the show, but the loopback carried the rest.
SRC = r'''
import datetime

import torch
import torch.distributed as dist

_pg = []


def _private():
    if not _pg:
        r, w = dist.get_rank(), dist.get_world_size()
        t = datetime.timedelta(seconds=20)
        store = dist.TCPStore("127.0.0.1", 29877, w, r == 0, timeout=t)
        _pg.append(dist.ProcessGroupGloo(store, r, w, t))
    return _pg[0]


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
        _private().allreduce([grads]).wait()   # unseen by the hub
        dist.reduce_scatter_tensor(torch.empty(self.shard), grads.clone())
        self.master.grad = grads[r * self.shard:(r + 1) * self.shard] / w
        self.adam.step()
        full = torch.empty(self.shard * w)
        dist.all_gather_into_tensor(full, self.master.detach())
        offset = 0
        for p in self.params:
            p.copy_(full[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
'''
build_result = {"lab": "zero", "source": SRC, "error": None,
                "ranks": [{}, {}], "config": {}}
