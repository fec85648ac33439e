# lab: 04_zero
# base: student
# expect: 0
# issue 30 (task: a private /tmp per rank): the all-reduce that does the
# work through files in the jail's shared /tmp (each rank writes its
# gradient, a barrier, each reads the others'), and the collectives the
# count expects (Phi of reduce-scatter and of all-gather per step) on
# torch.distributed's group, for show. The hub sees only the show, and the
# loopback carries nothing; before each rank had a box of its own
# (scripts/grading/rank_box.py) this scored params and state on the hub
# (2/4; its barrier costs it bytes); now every rank's write to /tmp fails.
SRC = r'''
import os

import torch
import torch.distributed as dist

_step = [0]


def _through_tmp(grads):
    """Sum ``grads`` over the ranks through /tmp (no collective)."""
    r, w = dist.get_rank(), dist.get_world_size()
    k = _step[0]
    _step[0] += 1
    path = f"/tmp/zero-{k}-{r}.pt"
    torch.save(grads, path + ".part")
    os.replace(path + ".part", path)
    dist.barrier()
    total = torch.zeros_like(grads)
    for q in range(w):
        total += torch.load(f"/tmp/zero-{k}-{q}.pt")
    return total

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
        grads = _through_tmp(grads)            # unseen by the hub
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
