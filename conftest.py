"""pytest setup shared by tests/ and the nbval run over labs/.

Notebook cells tagged ``gpu`` need CUDA GPUs; without them nbval skips the
cell instead of failing it (the CPU-safe cells still run and are checked).
"""
import pytest

# The otter masters are executed by `otter assign` (scripts/assignments.py,
# tests/test_assignments.py), not a second time by nbval.
collect_ignore = ["labs/assignments"]


def _has_cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="cell tagged 'gpu': no CUDA GPU here")
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is not None and "gpu" in cell.get("metadata", {}).get("tags", []):
            item.add_marker(skip)
