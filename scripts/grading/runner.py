"""Inside the student's jail: run the notebook, export its answers, serve
calls to its functions.

    python -m grading.runner NOTEBOOK        (started by scripts/grade.py)

Every code cell runs in order in one IPython shell, errors and all (a cell
that fails leaves its names undefined, as in Jupyter). Otter's own cells
(``grader = otter.Notebook(...)``, ``grader.check(...)``) are not run: the
grader, not the notebook, runs the tests; the other lines of the cell that
sets otter up (imports a student added there) run as written. Then one
JSON line goes to the grader: every global name as plain data (``plain.encode``), or marked as a
function, or as unreadable. After that the runner answers calls, one JSON
line each way: ``{"call": name, "args": [...], "kwargs": {...}}`` ->
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


def export(ns: dict) -> dict:
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
        try:
            out[name] = {"value": encode(v)}
        except NotPlain as e:
            if callable(v) and not suspicious(v):
                out[name] = {"function": True}
            else:
                out[name] = {"unreadable": f"{str(e)[:80]}, not plain data "
                             "the grader can read (numbers, strings, lists, "
                             "dicts, arrays)",
                             "tampering": suspicious(v)}
        except Exception as e:  # noqa: BLE001 - the student's object raised
            out[name] = {"unreadable": f"unreadable ({type(e).__name__})",
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
            errors.append(f"cell {i}: {type(err).__name__}")
    ns = shell.user_ns
    proto.write(json.dumps({"values": export(ns), "errors": errors}) + "\n")
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
            reply = {"error": f"{type(e).__name__}: {e}"[:200]}
        proto.write(json.dumps(reply) + "\n")
        proto.flush()


if __name__ == "__main__":
    main(sys.argv[1])
