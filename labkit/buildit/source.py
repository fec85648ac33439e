"""The text of the notebook cell(s) that defined a student's code.

IPython keeps every executed cell in ``linecache`` under a file name of
its own; a function's code object names that file, and a class's methods
(and nested classes) name theirs. ``labkit.buildit.run`` sends that text
to the ranks, which is why a build-it's code is the whole cell.
"""
from __future__ import annotations

import linecache
from pathlib import Path


def _code_objects(obj, seen=None):
    """The code objects of a function, or of a class's methods and nested
    classes (each class once: an ``autograd.Function`` and its generated
    ``_backward_cls`` point at each other)."""
    code = getattr(obj, "__code__", None)
    if code is not None:
        return [code]
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    out = []
    for v in vars(obj).values() if isinstance(obj, type) else ():
        v = getattr(v, "__func__", v)
        if isinstance(v, type):
            out += _code_objects(v, seen)
        elif getattr(v, "__code__", None) is not None:
            out.append(v.__code__)
    return out


def source_of(*objs) -> str:
    """The text of the cell(s) that defined ``objs`` (functions or classes)."""
    files: list[str] = []
    for obj in objs:
        for code in _code_objects(obj):
            if code.co_filename not in files:
                files.append(code.co_filename)
    if not files:
        raise ValueError("give the class or function you wrote (defined in "
                         "a cell), e.g. buildit.run('sharding', BucketedDDP)")
    texts = []
    for f in files:
        lines = linecache.getlines(f)
        if not lines and Path(f).is_file():
            lines = Path(f).read_text().splitlines(keepends=True)
        if not lines:
            raise ValueError(f"cannot find the source of {f}: define your "
                             "code in a notebook cell or a .py file")
        texts.append("".join(lines))
    return "\n\n".join(texts)
