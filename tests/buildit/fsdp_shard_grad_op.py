"""SHARD_GRAD_OP, not FULL_SHARD: keeps the gathered parameters from forward
to backward, so no second all-gather (bytes, peak)."""
import torch
import torch.distributed as dist


class FSDP:
    """FULL_SHARD over ``units``: shard, gather, free, reduce-scatter."""

    def __init__(self, units, lr):
        self.units, self.lr = units, lr
        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        self.shards = []     # this rank's chunk of each unit's flat params
        self.grads = []      # ... and of its averaged gradient
        self.shapes = [[p.shape for p in u.parameters()] for u in units]
        self.ready = [0] * len(units)
        for i, u in enumerate(units):
            flat = self._padded([p.detach() for p in u.parameters()])
            self.shards.append(flat.chunk(self.world)[self.rank].clone())
            self.grads.append(None)
            self._free(i)
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
        """All-gather unit i's flat parameters; its tensors view them."""
        full = self.shards[i].new_empty(self.world * len(self.shards[i]))
        dist.all_gather_into_tensor(full, self.shards[i])
        offset = 0
        for p, shape in zip(self.units[i].parameters(), self.shapes[i]):
            p.data = full[offset:offset + shape.numel()].view(shape)
            offset += shape.numel()

    def _free(self, i):
        # autograd saved these very tensors: swapping their data frees
        # the full values (dropping a name would not)
        for p in self.units[i].parameters():
            p.data = torch.empty(0)

    def _after_forward(self, i, out):
        pass

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
        self._free(i)

    def step(self):
        """SGD on this rank's shards (after ``loss.backward()``)."""
        with torch.no_grad():
            for shard, grad in zip(self.shards, self.grads):
                shard -= self.lr * grad
