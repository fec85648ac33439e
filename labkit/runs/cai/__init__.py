"""Pieces of ``labkit.runs.colossalai`` (chapter 9): the hybrid-parallel
plugin run (``hybrid``) and the patches that let Colossal-AI run on CPU
(``patches``). They run under ``.venv-colossalai``; imported by
``labkit.runs`` modules only.
"""
