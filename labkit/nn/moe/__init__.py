"""Mixture of experts: the router (:mod:`.router`), the one-process layer
(:mod:`.layer`) and its expert-parallel twin (:mod:`.expert_parallel`).
Chapter 13 and lab 13 (``experts``); the formulas are
:mod:`labkit.predict.experts`."""
