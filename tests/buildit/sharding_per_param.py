"""Wrong: one all-reduce per parameter (the cap is ignored).

Correct gradients and overlap, but as many calls as parameters: the
per-call latency that buckets exist to amortize."""
import torch.distributed as dist


class BucketedDDP:
    def __init__(self, model, bucket_cap_mb):
        self.handles = []
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(self._hook)

    def _hook(self, p):
        self.handles.append((p, dist.all_reduce(p.grad, async_op=True)))

    def finish(self):
        for p, work in self.handles:
            work.wait()
            p.grad /= dist.get_world_size()
        self.handles = []
