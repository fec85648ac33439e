"""``otter assign`` over many masters, importing otter once.

    from otter_once import assign_all
    done, log = assign_all([(name, master, folder), ...], width=2,
                           timeout=600, run_tests=True)
    # done: {name: (rc, seconds)}, rc None = killed at its time limit

Used by scripts/assignments.py (``build``) and scripts/handouts.py; not a command
of its own. Each master's results land in ``folder/out`` (what ``otter
assign MASTER folder/out`` writes) and its output in ``folder/otter.log``.

Why: one ``otter assign`` process spends ~7 CPU-s importing (nbconvert,
pandas, jsonschema's IRI grammar) before it reads the master, more than a
handout takes and a large share of a master whose solutions are formulas.
Here one process (``ZYGOTE``) imports what the ``otter`` command imports,
then forks one child per master, ``width`` at a time: each child is what
``otter assign`` would have been (its own session, folder and log, the
solutions run against their tests by otter's own code in a fresh
kernel), started without the imports. A child past ``timeout`` is killed
with its process group (rc None), as a timed-out ``otter`` process
was; a child dies with the zygote (``PR_SET_PDEATHSIG``), so killing
the zygote at its own time limit leaves no build running.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ZYGOTE = r'''import ctypes, json, os, signal, sys, time, traceback
import labkit.lazy_grammar  # noqa: F401  jsonschema's IRI grammar: on use
import otter.cli  # noqa: F401  what `otter assign` imports, once
from otter import logging as otter_logging
from otter.assign import main as assign
jobs, width, timeout, run_tests = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
print("READY", flush=True)      # imported: the builds' clock starts


def child(master, folder):
    os.setsid()
    libc.prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG: die with the zygote
    fd = os.open(os.path.join(folder, "otter.log"),
                 os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.chdir(folder)
    otter_logging.set_level(otter_logging.WARNING)  # the CLI's default
    try:
        assign(master, os.path.join(folder, "out"), no_pdfs=not run_tests,
               no_run_tests=not run_tests)
        return 0
    except BaseException:
        traceback.print_exc()
        return 1


queue, running = list(jobs), {}
while queue or running:
    while queue and len(running) < width:
        name, master, folder = queue.pop(0)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = child(master, folder)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        running[pid] = (name, time.monotonic())
    time.sleep(0.1)
    for pid, (name, t0) in list(running.items()):
        done, status = os.waitpid(pid, os.WNOHANG)
        seconds = time.monotonic() - t0
        if not done and seconds <= timeout:
            continue
        if not done:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
        rc = os.waitstatus_to_exitcode(status) if done else None
        print("ASSIGNED", json.dumps([name, rc, seconds]), flush=True)
        del running[pid]
'''


IMPORT_S = 900   # the zygote's imports: ~4 s idle, minutes on a loaded box


def assign_all(jobs: list[tuple[str, Path, Path]], width: int,
               timeout: float, run_tests: bool, env: dict | None = None,
               on_done=None) -> tuple[dict, str]:
    """``{name: (rc, seconds)}`` (rc None: killed at ``timeout``) for each
    ``(name, master, folder)``, started in that order, and the zygote's
    own output (a traceback if it failed before the first fork).
    ``on_done(name, rc, seconds)`` is called as each master ends, so what
    is done is kept even if the rest is then interrupted."""
    width = max(1, width)
    for _, _, folder in jobs:
        Path(folder).mkdir(parents=True, exist_ok=True)
    arg = json.dumps([[[n, str(m), str(f)] for n, m, f in jobs], width,
                      timeout, run_tests])
    t0 = time.monotonic()
    deadline = t0 + IMPORT_S     # until the zygote says READY
    proc = subprocess.Popen([sys.executable, "-c", ZYGOTE, arg],
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=env or os.environ,
                            cwd=jobs[0][2] if jobs else None)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: ([lines.put(x) for x in proc.stdout],
                                     lines.put(None)), daemon=True).start()
    done, log, killed = {}, [], False
    try:
        while True:
            try:
                line = lines.get(timeout=max(0, deadline - time.monotonic()))
            except queue.Empty:
                killed = True
                break
            if line is None:
                break       # the zygote is gone
            log.append(line)
            if line == "READY\n":
                deadline = time.monotonic() + \
                    timeout * -(-len(jobs) // width) + 120
            elif line.startswith("ASSIGNED "):
                name, rc, seconds = json.loads(line[len("ASSIGNED "):])
                done[name] = (rc, seconds)
                if on_done:
                    on_done(name, rc, seconds)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for name, _, _ in jobs:     # the zygote was killed, or died, first
        if name not in done:
            done[name] = (None if killed else 1, time.monotonic() - t0)
            if on_done:
                on_done(name, *done[name])
    return done, "".join(log)
