"""labkit: the code behind the chapters and labs of "Training at Scale".

- ``labkit.predict.*``  pure formulas (no torch import): memory ledger,
  communication volume, FLOPs/MFU, pipeline bubbles.
- ``labkit.measure.*``  the twins that measure the same quantities inside a
  real run: bytes per rank, bytes through each collective, profiler breakdown.
- ``labkit.runs.*``     entry modules started under torchrun, one per family.
- ``labkit.launch``     starts a torchrun job from a notebook cell.
- ``labkit.lab``        the predicted / measured / ratio records a lab saves.
- ``labkit.nn.model``   the tiny GPT all labs train (``labkit.nn``: the
  decoder and the mixture of experts; ``labkit.training``: wrap, train).

The layers, every folder and the module behind each chapter:
``docs/architecture.md`` (kept by ``.importlinter``). Command line:
``python -m labkit --help``.
"""
__version__ = "0.1.0"
