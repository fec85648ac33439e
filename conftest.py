"""pytest setup shared by tests/ and the nbval run over labs/.

Notebook cells tagged ``gpu`` need CUDA GPUs; without them nbval skips the
cell instead of failing it (the CPU-safe cells still run and are checked).
A cell tagged ``gpus-N`` too needs N GPUs: skipped when fewer are visible
(a one-GPU machine runs the ``gpu`` cells that need one).
"""
import pytest

# The otter masters are executed by `otter assign` (scripts/assignments.py,
# tests/test_assignments.py), not a second time by nbval.
collect_ignore = ["labs/assignments"]


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
