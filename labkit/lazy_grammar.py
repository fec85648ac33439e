"""Build jsonschema's IRI grammar when an IRI is checked, not at import.

    from labkit import lazy_grammar
    lazy_grammar.defer()     # before anything imports nbformat/jsonschema
    python -m pytest -p labkit.lazy_grammar ...   # the same, as a plugin

jsonschema imports ``rfc3987_syntax`` whenever it is installed (it is:
jupyter-events asks for ``jsonschema[format-nongpl]``), and that module
compiles 39 Earley grammars at import: ~1.2 CPU-s in every process that
imports nbformat, papermill, nbclient or otter (measured: ``import
nbformat`` 1.43 -> 0.18 CPU-s), though none of them checks the "iri"
format of a notebook. :func:`defer` puts a stand-in under that name: its
``is_valid_syntax`` (all jsonschema takes from it) and every other name
load the real module on first use, so an IRI check gives the same answer,
paid only when one is made. ``make test`` loads it as a pytest plugin
(pyproject.toml) and the scripts that read notebooks call it first.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import types

NAME = "rfc3987_syntax"


class _Deferred(types.ModuleType):
    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(real(), attr)


def real() -> types.ModuleType:
    """The real module, imported now if only the stand-in is there."""
    mod = sys.modules.get(NAME)
    if isinstance(mod, _Deferred):
        del sys.modules[NAME]
        try:
            mod = importlib.import_module(NAME)
        except BaseException:
            sys.modules[NAME] = _STAND_IN[0]
            raise
    return mod if mod is not None else importlib.import_module(NAME)


def is_valid_syntax(term: str, value: str) -> bool:
    return real().is_valid_syntax(term, value)


_STAND_IN: list = []


def defer() -> bool:
    """Put the stand-in in place; False when the module is already
    imported or not installed (then nothing changes)."""
    if NAME in sys.modules:
        return False
    spec = importlib.util.find_spec(NAME)
    if spec is None:
        return False
    mod = _Deferred(NAME, "stand-in: labkit.lazy_grammar")
    mod.__spec__ = spec
    mod.is_valid_syntax = is_valid_syntax
    _STAND_IN[:] = [mod]
    sys.modules[NAME] = mod
    return True


defer()   # importing this module is enough (pytest's -p)
