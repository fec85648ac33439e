"""One training step on many ranks: the loop and optimizer (``train``),
how a model is wrapped for DDP / FSDP / ZeRO (``wrap``), DeepSpeed's ZeRO
configurations (``zero_config``) and activation recomputation
(``recompute``). torch; imports ``labkit.nn``, ``labkit.dist``,
``labkit.device`` and ``labkit.predict``, never ``labkit.runs``.
"""
