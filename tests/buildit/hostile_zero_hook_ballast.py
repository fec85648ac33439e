# appended to: hostile_zero_kept_grads.py
"""Hostile: hostile_zero_kept_grads.py (ZeRO-2's reduce-scatters in
backward, no gradient ever freed) and a block of 5.6 MB that the first
gradient hook of each backward frees: alive as the hub reads the memory
before backward, gone at its end, so that the growth over backward
(every gradient, 8.4 MB) looks 5.6 MB smaller, under Phi / 2 (issue 49,
2). ``step()`` allocates the block again but after the probe's last
step, so that what the optimizer keeps is ZeRO-2's.

The hub reads the memory at every window: the block is there before
each backward beyond what the optimizer keeps after the last step:
0 on "freed"."""
_KeptGrads = ShardedAdam
PROBE_STEPS = 2          # the harness's HIDDEN["probe"]["steps"]


class ShardedAdam(_KeptGrads):
    def __init__(self, params, lr):
        super().__init__(params, lr)
        self.block, self.steps = torch.ones(1_400_000), 0

    def reduce(self, i, p):
        self.block = None
        super().reduce(i, p)

    def step(self):
        super().step()
        self.steps += 1
        if self.steps < PROBE_STEPS:
            self.block = torch.ones(1_400_000)
