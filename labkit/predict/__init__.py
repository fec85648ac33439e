"""Pure formulas: every module here imports no torch and runs anywhere
(the book's in-page calculators load this package in the browser). One
module or folder per chapter -- ``memory`` (1), ``collectives`` (2),
``sharding`` (3), ``zero`` (4), ``tensor_parallel`` (5),
``pipeline_parallel`` (6), ``checkpoint`` (8), ``mesh`` (10),
``context_parallel`` (11), ``fit`` (12), ``experts`` (13), ``precision``
(14), ``choosing`` (15) -- on top of ``model/`` (the architecture record,
config.json, parameters, FLOPs), ``activations/`` (the activation ledger),
``gpus`` (GPU presets), ``labtime`` and ``tolerance``. May import the
standard library and itself only (``.importlinter``: no torch, deepspeed
or transformers, nothing of ``labkit`` above it).
"""
