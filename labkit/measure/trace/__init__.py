"""Profiler traces, read: Kineto JSON streamed (``kineto``, ``stream``),
cut into compute / communication / idle per rank (``rank_breakdown``,
``hta_breakdown``, ``intervals``, ``kernels``, ``cpu_window``), the facts of
one step (``step_facts``), what-if estimates (``what_if``), the diagnosis
(``doctor``), the table (``show``) and the capture itself (``capture``).
Imports ``labkit.predict`` and the standard library; never ``labkit.runs``.
"""
