"""pytest setup shared by tests/ and the nbval run over labs/.

Notebook cells tagged ``gpu`` need CUDA GPUs; without them nbval skips the
cell instead of failing it (the CPU-safe cells still run and are checked).
A cell tagged ``gpus-N`` too needs N GPUs: skipped when fewer are visible
(a one-GPU machine runs the ``gpu`` cells that need one).

``make test`` runs two pytest-xdist workers (``-n 2``): one waits on a
hang, a timeout or a kill while the other computes. Each test module and
each notebook is one unit of work, run whole by one worker (its
module-scoped runs happen once; a notebook's cells stay in order); modules
that share files outside tmp_path share a unit (``SHARED``). xdist's own
``--dist loadgroup`` does not work with pytest 9 (it renames
``item._nodeid``, which pytest 9 no longer reads), hence the scheduler
below.
"""
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

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return _unit(nodeid)
    return ByModule(config, log)


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


def pytest_collection_modifyitems(config, items):
    visible = _gpu_count()
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is None:
            continue
        need = _gpus_needed(cell.get("metadata", {}).get("tags", []))
        if need > visible:
            item.add_marker(pytest.mark.skip(
                reason=f"cell needs {need} CUDA GPU(s), {visible} visible"))
