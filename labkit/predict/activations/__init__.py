"""The activation ledger: every tensor a forward keeps for backward, op
by op -- the course's GPT (``ledger``), any architecture record
(``arch``) and a mixture-of-experts block (``moe``). Pure Python:
imports :mod:`labkit.predict.model`; the pieces import ``ledger``,
never this package. ``saved`` and ``activation_bytes`` (the whole
GPT) live here because they read the record's ledger (``arch``).

    python -m labkit.predict.activations      # a table for the default GPT
"""
from __future__ import annotations

from labkit.predict.activations.ledger import (  # noqa: F401 (the API)
    DTYPE_BYTES, PRECISIONS, RECOMPUTE, DEVICES, SELECTIVE_SAVE, Saved,
    _check, _dtypes, _gpt, gpt_block_saved, block_saved, total,
    korthikanti_terms, table)


def saved(layers: int, hidden: int, heads: int, vocab: int, seq: int,
          batch: int, mlp_ratio: int = 4, precision: str = "fp32",
          recompute: str = "none", device: str = "cpu",
          strided_targets: bool = True) -> list[Saved]:
    """Every tensor one forward of the whole GPT keeps for backward: the
    record's ledger (:func:`labkit.predict.activations.arch.saved`) on
    :func:`labkit.predict.model.arch.gpt` of these positional sizes.

    ``strided_targets``: the targets are a strided view (as
    :func:`labkit.nn.model.batch` makes them on CPU), so ``flatten`` copies
    them; a contiguous copy (``.to("cuda")``) flattens to a view, no copy.
    """
    _check(precision, recompute, device, layers=layers, hidden=hidden,
           heads=heads, vocab=vocab, seq=seq, batch=batch,
           mlp_ratio=mlp_ratio)
    from labkit.predict.activations import arch as activations_arch
    from labkit.predict.model.arch import gpt
    return activations_arch.saved(gpt(layers, hidden, heads, vocab, seq,
                                      mlp_ratio), seq, batch, precision,
                                  recompute, strided_targets, device)


def activation_bytes(*args, **kw) -> int:
    """Bytes of :func:`saved` that grow with the batch (no weight copies)."""
    return total(saved(*args, **kw), "activation")
