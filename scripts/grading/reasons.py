"""Why a test case failed, in the grader's own words (``evaluate.py``).

    reason(exc, "hidden", 2, "q2", unreadable, mine) -> str

A public case is reported by its own assertion message or the error's
one line. A hidden case never by anything the student's process chose:
an error a student function raised is named by the built-in exception
it derives from (``error_kind``: a class the student defines may carry
the case's inputs in its name, its args, ``__str__``, ``__repr__`` or
notes), a failed check by the check's own message or "hidden check N of
q failed" and the kind of the student's values read (``kind_of``), never
their items.
"""
from __future__ import annotations

import builtins
import re

# the line a traceback or a doctest's output ends with: ``Type: message``
EXCEPTION_LINE = re.compile(r"^\s*\w+(Error|Exception): ")


class StudentError(Exception):
    """A student function raised, or returned something not plain;
    ``short``: the same in the grader's own words only (a hidden case's
    reason: a class name or a message may carry the case's inputs)."""

    def __init__(self, msg: str, short: str = "your function failed"):
        super().__init__(msg)
        self.short = short


# what a student's error is called in a hidden case's reason: a built-in
# exception's name, never the student's class (its name is the student's)
ERRORS = {k for k, v in vars(builtins).items()
          if isinstance(v, type) and issubclass(v, BaseException)}


def error_kind(text) -> str:
    """The built-in exception a runner's ``"Kind: message"`` names, or
    'an error' (the runner is the student's: its words are checked)."""
    k = str(text).partition(":")[0].strip()
    return k if k in ERRORS else "an error"


def one_line(text: str) -> str:
    """A message in one line: the last ``SomeError: message`` line of a
    text that holds a traceback or a doctest's output (that exception's
    message, which a check writes for the student), else the first line."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    last = [ln for ln in lines if EXCEPTION_LINE.match(ln)]
    if last:
        kind, _, msg = last[-1].partition(": ")
        return msg.strip() if kind == "AssertionError" and msg.strip() \
            else last[-1]
    return lines[0] if lines else ""


def kind_of(v) -> str:
    """What a value is, in kind ("a list of 3 tuples"), never its items."""
    if callable(v) and not isinstance(v, type):
        return "a function"
    name = type(v).__name__
    if isinstance(v, dict):
        return f"a dict of {len(v)} entries" if v else "an empty dict"
    if isinstance(v, (list, tuple, set)):
        inner = {type(x).__name__ for x in v}
        base = next(b.__name__ for b in (tuple, list, set)
                    if isinstance(v, b))
        what = (inner.pop().replace("Value", "").lower() + "s"
                if len(inner) == 1 else "items")
        return f"a {base} of {len(v)} {what}" if v else f"an empty {base}"
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        return f"a {name} of shape {tuple(v.shape)}"
    return f"a{'n' if name[0] in 'aeiou' else ''} {name}"


def reason(e: BaseException, kind: str, k: int, q: str,
           unreadable: dict, mine: dict | None = None) -> str:
    """Why case ``k`` of question ``q`` failed, by the check's own message
    (an assertion's, a build-it check's); never the test's code, and for a
    hidden case never its inputs (an error's message may carry them: only
    its type is given). ``mine``: the student's names the case reads, whose
    kinds are given when the check has no message of its own."""
    hidden = kind == "hidden"
    seen = "; ".join(f"your `{n}` is {kind_of(v)}"
                     for n, v in sorted((mine or {}).items()))[:160]
    seen = f" ({seen})" if seen else ""
    if isinstance(e, AssertionError):
        return one_line(str(e)) or f"{kind} check {k} of {q} failed{seen}"
    if isinstance(e, NameError):
        n = getattr(e, "name", None) or str(e)
        return (f"`{n}` is {unreadable[n]}" if n in unreadable
                else f"`{n}` is not defined")
    if isinstance(e, StudentError):
        # `f` ValueError: <the hidden inputs> -> `f` raised ValueError
        return e.short + " on a hidden case" if hidden else \
            one_line(str(e))
    if hidden:
        return (f"hidden check {k} of {q} failed: "
                f"{error_kind(type(e).__name__)}{seen}")
    return f"{kind} check {k} of {q} failed: " + one_line(
        f"{type(e).__name__}: {e}")
