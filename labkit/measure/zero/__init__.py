"""DeepSpeed's ZeRO, measured: one import for the three parts.

    from labkit.measure.zero import state_bytes, expected_bytes, estimator_rows

- :mod:`labkit.measure.zero.state`: DeepSpeed's own tensors, counted
  storage by storage (``state_bytes``, ``flat``, ``at_end_of_backward``);
- :mod:`labkit.measure.zero.expected`: lab 4's explanation rule, the ledger
  plus the terms DeepSpeed adds (``expected_bytes``, ``volume_units``);
- :mod:`labkit.measure.zero.estimators`: DeepSpeed's memory estimators as
  the ledger plus named terms (``estimator_rows``, ``ledger_terms``).

The folder's modules import ``labkit.predict`` and one another, never
this ``__init__``.
"""
from labkit.measure.zero.estimators import (  # noqa: F401
    DOC_ZERO2_EXAMPLE, DOC_ZERO3_EXAMPLE, GIB, deepspeed_defaults,
    estimator_rows, largest_layer_params, ledger_terms)
from labkit.measure.zero.expected import (  # noqa: F401
    expected_bytes, volume_units)
from labkit.measure.zero.state import (  # noqa: F401
    CATEGORIES, at_end_of_backward, flat, state_bytes)
