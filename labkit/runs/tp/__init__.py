"""Tensor-parallel layers that ``labkit.runs.tensor_parallel`` and
``labkit.runs.mesh`` (chapters 5 and 10) build: from scratch (``layers``,
``scratch``), on DTensor (``dtensor``), Megatron-core (``megatron``), a
Llama block (``llama``), grouped-query attention (``gqa``) and the copies
of KV heads (``kv_copies``). Imported by ``labkit.runs`` modules only.
"""
