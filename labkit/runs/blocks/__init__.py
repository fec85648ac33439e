"""Pieces the chapter entries of ``labkit.runs`` share: ring attention
(``cp_attention``, chapter 11), pipeline stages (``pp_stages``, chapter 6),
gradient accumulation (``accumulation``, chapter 12) and PyTorch's
ZeroRedundancyOptimizer (``zero_redundancy``, chapter 4). Imported by
``labkit.runs`` modules only.
"""
