"""What the lab runner says when a lab fails, in one line.

    detail = disk_fault(e, run_folder) or first_line(e)
    pm.execute_notebook(..., kernel_manager_class=quiet_kernel(log))
    runner_log(out / profile / "runner.log")   # once, before the first lab

:func:`first_line` is the summary's note: an error's own first line (a
``LaunchError``'s names the failing rank and its cause), never the end of
a traceback or of torchrun's log. :func:`disk_fault` finds a full or
read-only disk behind any error ("disk full at PATH"). :func:`quiet_kernel`
sends a kernel's own stderr to the run folder, so a kernel stopped with
its runner does not print its ZMQ traceback over the runner's last line;
:func:`runner_log` does the same for what papermill, nbclient and asyncio
log in the runner itself ("Kernel died while waiting for execute reply",
"Task exception was never retrieved"): the lab's status and its one-line
note already say it, the terminal keeps the runner's own lines. Used by ``scripts/run_labs.py``.
"""
from __future__ import annotations

from pathlib import Path

from labkit import disk


KERNEL_DIR = ".kernel"


def remove_connection_files(run: Path) -> None:
    """A run folder's kernel connection files, gone (every exit path)."""
    import shutil
    shutil.rmtree(Path(run) / KERNEL_DIR, ignore_errors=True)


def port_taken(e: BaseException, out_dir: Path) -> bool:
    """The kernel died before it answered, because a port its client
    chose was bound by another process between the choice and the
    kernel's bind (jupyter_client picks free TCP ports, the kernel binds
    them later: two runners starting kernels at once can collide). No
    cell has run: the lab can start again."""
    if "Kernel died before replying to kernel_info" not in str(e):
        return False
    try:
        log = (Path(out_dir) / "kernel-stderr.log").read_text(
            errors="replace")
    except OSError:
        return False
    return "Address already in use" in log


def quiet_kernel(log: Path):
    """A kernel manager whose kernel writes its own stderr to ``log`` (in
    the run folder): the ZMQ traceback a kernel prints when the runner is
    stopped mid-cell goes there, not over the runner's ``stopped:`` line.
    Cell output is unaffected (it reaches the notebook over ZMQ).

    Its connection file (the kernel's ports and HMAC key) is written in
    the run folder's private ``.kernel/`` (mode 0700), not the system's
    temporary folder: jupyter_client removes it when the kernel stops,
    and a runner killed by SIGKILL leaves it where the next start
    removes it (:func:`remove_connection_files`)."""
    import itertools
    import os

    from jupyter_client import AsyncKernelManager
    private = Path(log).parent / KERNEL_DIR
    numbers = itertools.count()

    class QuietKernel(AsyncKernelManager):
        def __init__(self, **kw):
            super().__init__(**kw)
            private.mkdir(mode=0o700, exist_ok=True)
            self.connection_file = str(
                private / f"kernel-{os.getpid()}-{next(numbers)}.json")

        async def _async_launch_kernel(self, kernel_cmd, **kw):
            with open(log, "ab") as f:
                kw["stderr"] = f
                return await super()._async_launch_kernel(kernel_cmd, **kw)
    return QuietKernel


RUNNER_LOGGERS = ("papermill", "nbclient", "traitlets", "asyncio")


def runner_log(log: Path) -> None:
    """Send the records of :data:`RUNNER_LOGGERS` to ``log`` (appended,
    created at the first record) instead of the terminal, for the rest of
    the process: asyncio reports a task's unretrieved exception when the
    task is collected, which can be after the runner has printed its last
    line."""
    import logging

    class QuietFile(logging.FileHandler):
        def emit(self, record):          # a full or read-only disk: lose
            try:                         # the record, never print over
                super().emit(record)     # the runner's lines
            except OSError:
                pass

        def handleError(self, record):
            pass
    handler = QuietFile(log, delay=True, encoding="utf-8")
    handler.setFormatter(logging.Formatter(
        "%(asctime)s %(name)s %(levelname)s %(message)s"))
    for name in RUNNER_LOGGERS:
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers
                    if getattr(h, "labkit_runner_log", False)]:
            logger.removeHandler(old)
            old.close()
        handler.labkit_runner_log = True
        logger.addHandler(handler)
        logger.propagate = False


def first_line(e: BaseException) -> str:
    """What the summary says of a failed lab: the error's own first line
    (a LaunchError's names the failing rank and its cause), not the end
    of a traceback or of torchrun's log."""
    name, value = getattr(e, "ename", None), getattr(e, "evalue", None)
    if name and value is not None:     # papermill: the cell's exception
        first = next((ln.strip() for ln in str(value).splitlines()
                      if ln.strip()), "")
        return f"{name}: {first}"[:300]
    text = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return (text[0] if text else repr(e))[:300]


def disk_fault(e: BaseException, where: Path | None = None) -> str | None:
    """"disk full at PATH" if a disk fault is behind ``e``, else None
    (papermill or nbformat may wrap it, or only show its effect: a
    notebook cut short is "not JSON"), so ``where`` is checked too."""
    seen = 0
    while e is not None and seen < 10:
        if isinstance(e, OSError) and disk.describe(e):
            return disk.describe(e)
        e, seen = e.__cause__ or e.__context__, seen + 1
    if where is not None:
        try:
            disk.check_writable(where, need_bytes=2 ** 20)
        except ValueError as full:
            return str(full)
    return None
