"""Train the tiny GPT under FSDP2 with four optimizers; keep their bytes.

    torchrun --nproc-per-node 2 -m labkit.runs.optimizers \
        --optimizers adamw,adafactor,adamw8bit,muon \
        --muon-modes gather,dealt --steps 8

One launch (``__main__``) trains the same model from the same seed on the
same batches once per optimizer (``labkit.training.optimizers.make``),
every parameter sharded by ``fully_shard``, and records per rank:

- ``losses``: the global-batch loss of every step;
- ``state`` and ``state_kinds``: bytes of ``optimizer.state`` on this
  rank after the last step (:mod:`labkit.measure.optimizers`);
- ``collectives``: what the last step's ``optimizer.step()`` issued,
  counted by :class:`labkit.measure.collectives.CollectiveCounter`.

``muon`` is ``torch.optim.Muon`` on the DTensors as they are (DTensor
redistributes behind the matmuls); each ``--muon-modes`` entry adds a run
of :class:`labkit.training.optimizers.ShardedMuon` (``muon_gather``,
``muon_dealt``). With ``--reference`` rank 0 also trains the unsharded
model with ``torch.optim.Muon`` in one process, and every Muon run records
how far its parameters end from it (``max_abs_diff``).
"""
