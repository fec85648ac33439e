"""Inside the student's jail: run the notebook, export its answers, serve
calls to its functions.

    python -m grading.runner NOTEBOOK        (started by scripts/grade.py)

Every code cell runs in order in one IPython shell, errors and all (a cell
that fails leaves its names undefined, as in Jupyter). Otter's own cells
(``grader = otter.Notebook(...)``, ``grader.check(...)``) are not run: the
grader, not the notebook, runs the tests; the other lines of the cell that
sets otter up (imports a student added there) run as written. Then one
JSON line goes to the grader: every global name as plain data
(``plain.encode``), or marked as a function, or as unreadable (each
announced first by a ``{"reading": name}`` line, so that a runner that
dies on a value is said to have died on it). After that the runner
answers calls, one JSON line each way: ``{"call": name, "args": [...], "kwargs": {...}}`` ->
``{"value": ...}`` or ``{"error": "..."}``.

Everything here is as untrusted as the notebook: the grader only ever
reads plain data from it, so a notebook that takes the runner over can
forge no more than its own answers.
"""
from __future__ import annotations

import json
import os
import re
import sys
import types

from grading.plain import NotPlain, encode, suspicious

OTTER_CELL = re.compile(r"^\s*grader\.(check|check_all|export)\(.*\)\s*$",
                        re.S)
SKIP = {"In", "Out", "get_ipython", "exit", "quit", "grader", "otter"}


class Stub:
    """``grader`` for cells that call it outside otter's own cells."""

    def __getattr__(self, name):
        return lambda *a, **k: None


def without_otter(src: str) -> str:
    """The cell without otter's own statements: ``import otter`` (other
    names of the same import stay), ``grader = otter.Notebook(...)`` and
    the notebook-finding lines before it, ``grader.check...(...)``."""
    import ast
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return src
    lines = src.splitlines(keepends=True)
    out = list(lines)
    sets_up = any(isinstance(n, ast.Assign) and "otter.Notebook(" in
                  ast.get_source_segment(src, n) for n in tree.body)
    for node in tree.body:
        seg = ast.get_source_segment(src, node) or ""
        span = range(node.lineno - 1, node.end_lineno)
        if isinstance(node, ast.Import) and any(
                a.name.split(".")[0] == "otter" for a in node.names):
            keep = [a for a in node.names if a.name.split(".")[0] != "otter"]
            new = ("import " + ", ".join(
                a.name + (f" as {a.asname}" if a.asname else "")
                for a in keep) + "\n") if keep else ""
            out[node.lineno - 1] = " " * node.col_offset + new
            for k in span[1:]:
                out[k] = ""
        elif isinstance(node, ast.ImportFrom) and \
                (node.module or "").split(".")[0] == "otter":
            for k in span:
                out[k] = ""
        elif OTTER_CELL.match(seg) or "otter.Notebook(" in seg or (
                sets_up and re.search(r"\b_mine\b", seg)):
            for k in span:   # otter's own set-up and checks
                out[k] = ""
    return "".join(out)


def kind(e: BaseException) -> str:
    """The built-in exception ``e`` derives from: the name the grader
    gives (the student's own class name may carry anything)."""
    return next(c.__name__ for c in type(e).__mro__
                if c.__module__ == "builtins")


def message(e: BaseException) -> str:
    """``Kind: message`` of a student's error, whatever its ``__str__``
    does (the grader quotes it for a public case only)."""
    try:
        text = str(e)
    except BaseException:  # noqa: BLE001 - the student's __str__
        text = "(its message could not be read)"
    return f"{kind(e)}: {text}"[:200]


def as_json(value) -> str | None:
    """``value`` (plain data) as JSON, None when it cannot be written (an
    int of more digits than Python writes, too deep for the writer)."""
    try:
        return json.dumps(value)
    except (ValueError, TypeError, RecursionError, OverflowError):
        return None


def export(ns: dict, say=None) -> dict:
    """Every answer as plain data; ``say(name)`` before each is read (a
    runner that dies on a value then names it: ``session.py``)."""
    out = {}
    for name, v in list(ns.items()):
        if name.startswith("__") or name in SKIP or re.match(r"_i*\d*$",
                                                              name):
            continue
        if isinstance(v, (types.ModuleType, type)):
            continue
        if v is Ellipsis:
            out[name] = {"unreadable": "not answered (still `...`)"}
            continue
        if say:
            say(name)
        try:
            out[name] = {"value": encode(v)}
            if as_json(out[name]) is None:
                out[name] = {"unreadable": "a value the grader could not "
                             "read as data (too large or too deep)"}
        except NotPlain as e:
            if callable(v) and not suspicious(v):
                out[name] = {"function": True}
            else:
                out[name] = {"unreadable": f"{str(e)[:80]}, not plain data "
                             "the grader can read (numbers, strings, lists, "
                             "dicts, arrays)",
                             "tampering": suspicious(v)}
        except BaseException as e:  # noqa: BLE001 - the student's object
            out[name] = {"unreadable": f"unreadable ({kind(e)})",
                         "tampering": suspicious(v)}
    return out


def main(path: str) -> None:
    proto = os.fdopen(os.dup(1), "w")          # not inherited by children
    log = os.open("runner.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    shell.user_ns["grader"] = Stub()
    nb = json.load(open(path, encoding="utf-8"))
    errors = []
    for i, cell in enumerate(nb.get("cells", [])):
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else str(src)
        if cell.get("cell_type") != "code" or OTTER_CELL.match(src):
            continue
        if "otter" in src:
            src = without_otter(src)
        r = shell.run_cell(src, store_history=False)
        err = r.error_before_exec or r.error_in_exec
        if err is not None:
            errors.append(f"cell {i}: {kind(err)}")
    ns = shell.user_ns

    def say(name):
        proto.write(json.dumps({"reading": name}) + "\n")
        proto.flush()
    proto.write(json.dumps({"values": export(ns, say), "errors": errors})
                + "\n")
    proto.flush()
    from grading.plain import decode
    for line in sys.stdin:
        try:
            req = json.loads(line)
            fn = ns[req["call"]]
            value = fn(*decode(req["args"]), **decode(req["kwargs"]))
            reply = {"value": encode(value)}
        except NotPlain as e:
            reply = {"error": f"returned {e}, not plain data"}
        except BaseException as e:  # noqa: BLE001 - report, keep serving
            reply = {"error": message(e)}
        text = as_json(reply)
        proto.write((text or json.dumps({"error": "returned a value the "
                                         "grader could not read as data "
                                         "(too large or too deep)"}))
                    + "\n")
        proto.flush()


if __name__ == "__main__":
    main(sys.argv[1])
