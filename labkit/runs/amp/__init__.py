"""Pieces of ``labkit.runs.precision`` (chapter 14): the FSDP run with a
sharded gradient scaler (``dist``), DeepSpeed's bf16 (``deepspeed``) and
the scaled steps both share (``steps``). Imported by ``labkit.runs``
modules only.
"""
