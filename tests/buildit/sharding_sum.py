"""Wrong: buckets and overlap right, but the gradients are summed, not
averaged (the learning rate is silently multiplied by the world size)."""
import torch
import torch.distributed as dist


class BucketedDDP:
    def __init__(self, model, bucket_cap_mb):
        cap, self.buckets, size = bucket_cap_mb * 2**20, [[]], 0
        self.where = {}
        for p in reversed(list(model.parameters())):
            self.buckets[-1].append(p)
            self.where[p] = len(self.buckets) - 1
            size += p.numel() * p.element_size()
            if size >= cap:
                self.buckets.append([])
                size = 0
        if not self.buckets[-1]:
            self.buckets.pop()
        self.seen, self.handles = [0] * len(self.buckets), []
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(self._hook)

    def _hook(self, p):
        k = self.where[p]
        self.seen[k] += 1
        if self.seen[k] == len(self.buckets[k]):
            flat = torch.cat([q.grad.flatten() for q in self.buckets[k]])
            self.handles.append((k, flat, dist.all_reduce(flat,
                                                          async_op=True)))

    def finish(self):
        for k, flat, work in self.handles:
            work.wait()
            offset = 0
            for q in self.buckets[k]:
                q.grad.copy_(flat[offset:offset + q.numel()].view_as(q))
                offset += q.numel()
        self.seen, self.handles = [0] * len(self.buckets), []
