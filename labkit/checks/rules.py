"""The rules a lab parameter's value obeys, whatever the lab.

    from labkit.checks.rules import integer, number, require
    steps = integer("steps", 3, low=1)            # 3
    timeout_s = number("timeout_s", "300", low=0, open_low=True)  # 300.0
    integer("steps", 2.5, low=1)   # ValueError: steps=2.5: must be an
                                   # integer >= 1

Every refusal is one ``ValueError`` whose line names the parameter, the
value and the rule, so a lab stops before it starts a process. papermill
hands ``-p steps 2.5`` over as a float and ``-r steps 300`` as a string:
a string is parsed (``"300"`` is 300) or refused (``"abc"``); a float is
never taken for an integer; NaN and infinity are never a number here.
"""
from __future__ import annotations

import ast
import math


def require(condition: bool, message: str) -> None:
    """Stop a lab with a clear message before any process is started."""
    if not condition:
        raise ValueError(message)


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def refuse(name: str, value, rule: str):
    raise ValueError(f"{name}={_show(value)}: must be {rule}")


def _parse(value):
    """A papermill string as the Python value it spells, else itself."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    words = {"true": True, "false": False, "none": None}
    if text.lower() in words:
        return words[text.lower()]
    if text[:1] in "[({":
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return value
    return value


def _bounds(low, high) -> str:
    if high is None:
        return f">= {low}"
    return f"in [{low}, {high}]"


def integer(name: str, value, low: int = 1, high: int | None = None):
    """An int (not a bool, not a float) in ``[low, high]``."""
    v = _parse(value)
    if isinstance(v, bool) or not isinstance(v, int):
        refuse(name, value, f"an integer {_bounds(low, high)}")
    if v < low or (high is not None and v > high):
        refuse(name, value, f"an integer {_bounds(low, high)}")
    return v


def number(name: str, value, low: float = 0.0, high: float | None = None,
           open_low: bool = False):
    """A finite int or float, ``> low`` (``open_low``) or ``>= low``."""
    v = _parse(value)
    rule = (f"a finite number {'>' if open_low else '>='} {low}"
            + ("" if high is None else f" and <= {high}"))
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        refuse(name, value, rule)
    if not math.isfinite(v) or v < low or (open_low and v == low) or (
            high is not None and v > high):
        refuse(name, value, rule)
    return v


def boolean(name: str, value):
    v = _parse(value)
    if not isinstance(v, bool):
        refuse(name, value, "True or False")
    return v


def integers(name: str, value, low: int = 1, high: int | None = None,
             empty: bool = False):
    """A list (or tuple) of integers in ``[low, high]``."""
    v = _parse(value)
    if not isinstance(v, (list, tuple)) or (not v and not empty):
        refuse(name, value, f"a {'' if empty else 'non-empty '}list of "
               f"integers {_bounds(low, high)}")
    return [integer(f"{name}[{i}]", x, low, high) for i, x in enumerate(v)]


def numbers(name: str, value, low: float = 0.0, open_low: bool = True,
            high: float | None = None):
    v = _parse(value)
    if not isinstance(v, (list, tuple)) or not v:
        refuse(name, value, "a non-empty list of finite numbers")
    return [number(f"{name}[{i}]", x, low, high, open_low=open_low)
            for i, x in enumerate(v)]


def strings(name: str, value, empty: bool = True):
    v = _parse(value)
    if not isinstance(v, (list, tuple)) or not all(
            isinstance(s, str) for s in v) or (not v and not empty):
        refuse(name, value, "a list of names")
    return list(v)


def mapping(name: str, value, high: int):
    """A model shape: a dict of positive integers (at most ``high``)."""
    v = _parse(value)
    if not isinstance(v, dict):
        refuse(name, value, "a dict such as {'layers': 2, 'hidden': 64}")
    return {k: integer(f"{name}[{k!r}]", x, 1, high) for k, x in v.items()}
