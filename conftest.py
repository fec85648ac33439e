"""pytest setup shared by tests/ and the nbval run over labs/.

Notebook cells tagged ``gpu`` need CUDA GPUs; without them nbval skips the
cell instead of failing it (the CPU-safe cells still run and are checked).
A cell tagged ``gpus-N`` too needs N GPUs: skipped when fewer are visible
(a one-GPU machine runs the ``gpu`` cells that need one).

``make test`` runs three pytest-xdist workers on two cores (``-n 3``):
a worker waiting on a hang, a timeout, a kill or a browser leaves the
cores to the other two (990 s of test phases measured here, against
about 1030 s expected with two workers from the same CPU seconds). Each
test module and each notebook is one unit of work, run whole by one worker (its
module-scoped runs happen once; a notebook's cells stay in order); modules
that share files outside tmp_path share a unit (``SHARED``). xdist's own
``--dist loadgroup`` does not work with pytest 9 (it renames
``item._nodeid``, which pytest 9 no longer reads), hence the scheduler
below.

Lab 9 and the tests that run Colossal-AI need ``.venv-colossalai`` (built
by ``make colossalai`` with Python 3.11 or 3.12, scripts/cai_python.sh).
Without it they are skipped with the one line saying what to install or
run, never silently; under ``CI=true`` (CI has the interpreter) they fail
with that line instead.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

# The otter masters are executed by `otter assign` (scripts/assignments.py,
# tests/test_assignments.py), not a second time by nbval.
collect_ignore = ["labs/assignments"]


# test_assignments writes _build/assignments; test_grade reads it and checks
# it is unchanged by grading.
SHARED = {"tests/test_assignments.py": "assignments",
          "tests/test_grade.py": "assignments"}


def _unit(nodeid: str) -> str:
    path = nodeid.split("::")[0]
    return SHARED.get(path, path)


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    # xdist would reorder the units by their number of tests: the order of
    # pytest_collection_modifyitems below is kept instead
    config.option.loadscopereorder = False

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return _unit(nodeid)
    return ByModule(config, log)


# LABKIT_TIMELINE=FILE: one JSON line per test phase (unit, worker, start,
# stop), written by the controller: scripts/timeline.py reads it
# (where a run's wall time went: each unit's seconds, each worker's idle
# time and tail, the longest-first order).
TIMELINE = os.environ.get("LABKIT_TIMELINE") and os.path.abspath(
    os.environ["LABKIT_TIMELINE"])


_CPU = [None]


def _cpu_s() -> float:
    """CPU seconds of this process and its reaped descendants (torchrun,
    its ranks, a notebook's kernel once it is shut down)."""
    import resource
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """The CPU seconds spent since the worker's previous report ride on
    this report (``cpu``), so the timeline tells a unit that computes
    from one that waits (a hang, a timeout, a sleep)."""
    outcome = yield
    if not TIMELINE:
        return
    now = _cpu_s()
    last, _CPU[0] = _CPU[0], now
    outcome.get_result().user_properties.append(
        ("cpu", round(now - (last if last is not None else now), 3)))


def pytest_runtest_logreport(report):
    if not TIMELINE or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    import json
    worker = getattr(getattr(report, "node", None), "gateway", None)
    cpu = dict(getattr(report, "user_properties", ()) or ()).get("cpu")
    try:
        with open(TIMELINE, "a") as f:
            f.write(json.dumps({
                "id": report.nodeid, "unit": _unit(report.nodeid),
                "when": report.when, "worker": getattr(worker, "id", "main"),
                "start": report.start, "stop": report.stop,
                "cpu": cpu}) + "\n")
    except OSError:
        pass   # a measurement only: never a test's failure


ROOT = Path(__file__).resolve().parent
CAI_PYTHON = ROOT / ".venv-colossalai" / "bin" / "python"
NEEDS_CAI = ("labs/09_colossalai.ipynb",)   # whole units; tests use the
#                                             needs_colossalai fixture


def colossalai_missing() -> str | None:
    """Why ``.venv-colossalai`` is not there (None when it is); asked once
    per session (some test modules refuse to start processes)."""
    if "reason" not in _CAI:
        _CAI["reason"] = _why_no_colossalai()
    return _CAI["reason"]


_CAI: dict = {}


def pytest_sessionstart(session):
    colossalai_missing()


def _why_no_colossalai() -> str | None:
    if CAI_PYTHON.exists():
        return None
    r = subprocess.run(["sh", str(ROOT / "scripts" / "cai_python.sh"),
                        os.environ.get("CAI_PYTHON", ""), sys.executable],
                       capture_output=True, text=True)
    if r.returncode == 0:
        return (f"no .venv-colossalai: `make colossalai` builds it with "
                f"{r.stdout.strip()}")
    return r.stderr.strip()


def _colossalai_gate() -> None:
    reason = colossalai_missing()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def needs_colossalai():
    """Skip (fail under CI=true) without .venv-colossalai, with the reason."""
    _colossalai_gate()


def pytest_runtest_setup(item):
    if item.nodeid.split("::")[0] in NEEDS_CAI:
        _colossalai_gate()
    if _unit(item.nodeid) in BOOK_UNITS:
        book_built()


def _gpu_count() -> int:
    try:
        import torch
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


def _gpus_needed(tags) -> int:
    n = 1 if "gpu" in tags else 0
    for t in tags:
        if t.startswith("gpus-") and t[5:].isdigit():
            n = max(n, int(t[5:]))
    return n


# make test runs the strict book build beside the tests (Makefile): the
# modules that read the built HTML go last and wait for it.
# LABKIT_BOOK_BUILDING=FILE: the build's exit status is written there when
# it ends (its log beside it, ``.log`` for ``.rc``).
BOOK_UNITS = ("tests/test_book_corrections.py", "tests/test_build_book.py",
              "tests/test_calculators_browser.py",
              "tests/test_offline_html.py", "tests/test_site_links.py",
              "tests/test_student_build.py", "tests/test_zh_html.py",
              "tests/test_zh_search.py", "tests/test_zh_theme.py")
BOOK_WAIT_S = 1800.0
_BOOK: dict = {}


def book_built() -> None:
    """Block until make test's strict build (LABKIT_BOOK_BUILDING) has
    ended; fail, naming its log, if it failed. Nothing when unset."""
    rc_file = os.environ.get("LABKIT_BOOK_BUILDING")
    if not rc_file:
        return
    if "rc" not in _BOOK:
        import time
        rc_path = Path(rc_file)
        deadline = time.monotonic() + BOOK_WAIT_S
        while not rc_path.exists() and time.monotonic() < deadline:
            time.sleep(1.0)
        text = rc_path.read_text().strip() if rc_path.exists() else ""
        _BOOK["rc"] = int(text) if text.lstrip("-").isdigit() else None
    rc = _BOOK["rc"]
    if rc != 0:
        log = Path(rc_file).with_suffix(".log")
        said = ("did not end within "
                f"{BOOK_WAIT_S:.0f} s" if rc is None else f"exited {rc}")
        pytest.fail(f"the strict book build {said}: see {log}",
                    pytrace=False)


# the longest units (make test's timeline: 130-420 s each on 3 busy
# workers) start first, so none of them is the tail
FIRST = ("assignments", "tests/test_rehearse.py", "tests/test_runs_zero.py")


def _order(item) -> int:
    unit = _unit(item.nodeid)
    return 0 if unit in FIRST else 2 if unit in BOOK_UNITS else 1


def pytest_collection_modifyitems(config, items):
    # the longest units first, the ones that read the built book last (so
    # the build has ended before a worker waits on it); stable otherwise
    items.sort(key=_order)
    visible = _gpu_count()
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is None:
            continue
        need = _gpus_needed(cell.get("metadata", {}).get("tags", []))
        if need > visible:
            item.add_marker(pytest.mark.skip(
                reason=f"cell needs {need} CUDA GPU(s), {visible} visible"))
