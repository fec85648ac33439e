"""One training step on many ranks: the loop and optimizer (``train``),
how a model is wrapped for DDP / FSDP / ZeRO (``wrap``), DeepSpeed's ZeRO
variants (``labkit.predict.zero``), activation recomputation
(``recompute``), a model built where it lives (``meta_init``: on a
GPU, on the meta device and materialised sharded) and the optimizers of
chapter 19 over FSDP2's shards (``optimizers``). torch; imports
``labkit.nn``, ``labkit.dist``,
``labkit.device`` and ``labkit.predict``, never ``labkit.runs``.
DeepSpeed's ZeRO variants are pure data: :mod:`labkit.predict.zero`.
"""
