"""What chapter 9 says about Colossal-AI's "automatic parallelism", checked
in the code of the pinned version (0.5.0 in .venv-colossalai) without
importing it: the files are read as text, so the test costs milliseconds.
Skipped, with the reason, when the environment is not built
(`make colossalai`; conftest.py)."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SITE = sorted((ROOT / ".venv-colossalai" / "lib").glob(
    "python3*/site-packages"))
CAI = SITE[0] / "colossalai" if SITE else None
pytestmark = pytest.mark.usefixtures("needs_colossalai")  # conftest.py


def _src(rel):
    return (CAI / rel).read_text()


def _exports(rel):
    tree = ast.parse(_src(rel))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                getattr(t, "id", None) == "__all__" for t in node.targets):
            return {ast.literal_eval(e) for e in node.value.elts}
    raise AssertionError(f"no __all__ in {rel}")


def _functions(rel):
    return {n.name for n in ast.parse(_src(rel)).body
            if isinstance(n, ast.FunctionDef)}


def test_the_pinned_version():
    assert "0.5.0" in _src("version.py")


def test_no_top_level_initialize_launch_only_starts_the_group():
    assert "initialize" not in _exports("__init__.py")
    assert {"launch", "launch_from_torch"} <= _exports("__init__.py")
    assert "initialize" in _functions("legacy/initialize.py")
    launch = next(n for n in ast.parse(_src("initialize.py")).body
                  if isinstance(n, ast.FunctionDef) and n.name == "launch")
    body = ast.unparse(launch)
    assert "init_process_group" in body and "set_seed" in body
    for word in ("topolog", "search", "solver", "auto_parallel"):
        assert word not in body.lower()


def test_the_booster_does_not_search():
    for f in (CAI / "booster").rglob("*.py"):
        assert "auto_parallel" not in f.read_text(), f


def test_autoparallelize_is_an_ilp_over_operator_shardings():
    init = "auto_parallel/tensor_shard/initialize.py"
    assert "autoparallelize" in _functions(init)
    assert "AlphaBetaProfiler" in _src(init) and "ColoTracer" in _src(init)
    solver = _src("auto_parallel/tensor_shard/solver/solver.py")
    assert "import pulp" in solver and "COIN_CMD" in solver
    assert "torch.cuda" in _src("device/alpha_beta_profiler.py")
    assert _src("auto_parallel/pipeline_shard/__init__.py").strip() == ""
    assert "dynamic programming" in _src(
        "auto_parallel/checkpoint/ckpt_solver_rotor.py")


def test_pulp_is_not_installed_in_the_pinned_environment():
    assert not (SITE[0] / "pulp").exists()
