"""Measurements taken inside real runs; twins of ``labkit.predict`` with
matching names (``memory``, ``collectives``, ``activations``,
``checkpoint``, ``fit``, ``precision``, ``zero/``), plus the profiler's
side (``profiling`` and the trace readers in ``trace/``), ``alpha_beta``
and ``hang``. May import torch, ``labkit.predict`` and the root modules
(``dist``, ``device``); never ``labkit.runs`` (``.importlinter``).
"""
