"""The book build as a transaction (scripts/book_zh.py calls these): the
new site swapped in whole, and its output passed through with one change.

    swap_in(out / "next" / "_build" / "html", out / "html")
    recover(out / "html")              # a swap killed half-way, finished
    for line in dead_kernels(lines):   # book_zh.sphinx()'s output
        print(line)

The site is built in ``_build/next`` and renamed into place only when
both editions are complete, so a failed or killed build leaves the last
good book whole. In the output, a chapter whose kernel died is one line
naming the page, not a traceback.

myst-nb prints the executor's whole traceback when a chapter fails
(``nb_execution_show_tb``, kept on for a cell's own error, which a
reader of the log needs). A kernel that died (``DeadKernelError``: out
of memory, a segfault, a second build deleting the first's files) has no
cell error to show: its 100 lines of nbclient and asyncio frames say
nothing the one line does not. The page is the last source path the
log named before the traceback.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

PAGE = re.compile(r"((?:book|labs)/[\w./-]+?)(?:\.md|\.ipynb)?(?::|\s|$)")
DEAD = "DeadKernelError"


def dead_kernels(lines):
    """``lines`` as they come, each traceback that ends in a
    DeadKernelError replaced by one line; any other traceback kept."""
    page, held = "?", []
    for line in lines:
        line = line.rstrip("\n")
        if held:
            held.append(line)
            if line.startswith((" ", "\t")) or not line.strip() or \
                    line.startswith(("Traceback", "During handling",
                                     "The above exception")):
                continue
            if line.startswith(("^", "~")):       # a caret line
                continue
            if DEAD in line:                      # the exception line
                yield (f"book: the kernel of {page} died ({DEAD}): "
                       "see the chapter's cells, or run it alone")
            else:
                yield from held
            held = []
            continue
        if line.startswith("Traceback (most recent call last)"):
            held = [line]
            continue
        found = PAGE.search(line)
        if found:
            page = found.group(1)
        yield line
    yield from held


def swap_in(new: Path, html: Path) -> None:
    """Put the complete site ``new`` at ``html`` by renames only: the old
    site is renamed ``html.old`` and removed last, so a build killed at
    any moment leaves one whole book (:func:`recover` finishes a swap
    killed between its two renames)."""
    old = html.with_name(html.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if html.exists():
        os.rename(html, old)
    os.rename(new, html)
    shutil.rmtree(old, ignore_errors=True)


def recover(html: Path) -> str | None:
    """Put back the last complete book if a build died inside
    :func:`swap_in`; a line saying so (None: nothing to do)."""
    old = html.with_name(html.name + ".old")
    if not old.exists():
        return None
    if html.exists():              # killed after the new site went in
        shutil.rmtree(old, ignore_errors=True)
        return None
    os.rename(old, html)
    return (f"book: {html} put back (a build was stopped while swapping "
            "in its site)")
