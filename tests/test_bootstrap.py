"""The labs' first cell: installs the course outside its checkout, else no-op.

Mirrors ``labkit/bootstrap.py``. The install is tested for real, in a fresh
virtual environment without labkit, from this checkout (LABKIT_SOURCE; pip
reaches PyPI only for the build backend): the cell prints one progress line
and installs; run again it does nothing.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

from labkit import bootstrap

ROOT = Path(__file__).resolve().parent.parent


def test_every_lab_starts_with_the_current_cell():
    assert bootstrap.labs()
    stale = bootstrap.stale(bootstrap.cell_source(bootstrap.requirement()))
    assert not stale, f"{stale}: run python -m labkit.bootstrap --write"
    for path in bootstrap.labs():
        cells = [c for c in json.loads(path.read_text())["cells"]
                 if c["cell_type"] == "code"]
        assert bootstrap.TAG in cells[0]["metadata"]["tags"], path.name
        # hidden on the HTML page, still executed everywhere
        assert "remove-input" in cells[0]["metadata"]["tags"], path.name
        assert "parameters" in cells[1]["metadata"].get("tags", []), path.name


def test_requirement_comes_from_config(tmp_path):
    cfg = tmp_path / "_config.yml"
    cfg.write_text('repository:\n  url: ""  # repository\n  branch: main\n')
    assert bootstrap.requirement(cfg) == ""
    cfg.write_text('repository:\n  url: "https://github.com/me/fork"\n'
                   "  branch: dev  # repository\n")
    assert bootstrap.requirement(cfg) == "labkit @ git+https://github.com/me/fork@dev"
    assert "git+https://github.com/me/fork@dev" in bootstrap.cell_source(
        bootstrap.requirement(cfg))


def test_cell_is_a_no_op_where_labkit_is_importable(capsys, monkeypatch):
    def no_install(*a, **k):
        raise AssertionError("the cell ran pip in the checkout")
    monkeypatch.setattr(subprocess, "run", no_install)
    exec(bootstrap.cell_source("labkit @ git+https://example.invalid/x"), {})
    assert capsys.readouterr().out == ""


def test_cell_installs_the_course_in_a_fresh_environment(tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    cell = tmp_path / "cell.py"
    cell.write_text(bootstrap.cell_source("labkit @ git+https://example.invalid/x"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    src = tmp_path / "course"  # a copy: pip builds in the source tree
    shutil.copytree(ROOT / "labkit", src / "labkit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", src)
    env.update(LABKIT_SOURCE=str(src), PIP_DISABLE_PIP_VERSION_CHECK="1")
    probe = [str(py), "-c", "import labkit.predict.memory as m; print(m.__file__)"]
    assert subprocess.run(probe, env=env, cwd=tmp_path,
                          capture_output=True).returncode != 0
    first = subprocess.run([str(py), str(cell)], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == bootstrap.PROGRESS  # one line, pip quiet
    where = subprocess.run(probe, env=env, cwd=tmp_path, capture_output=True,
                           text=True, check=True).stdout
    assert str(env_dir) in where  # installed, not found through the checkout
    again = subprocess.run([str(py), str(cell)], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stdout == ""


def _pins(path: Path) -> dict[str, str]:
    lines = [line.strip() for line in path.read_text().splitlines()]
    return dict(line.lower().split("==") for line in lines
                if line and not line.startswith(("#", "-")))


def test_binder_environment_pins_the_same_versions():
    """Binder installs binder/requirements.txt: the same pins, none missing."""
    binder = _pins(ROOT / "binder" / "requirements.txt")
    assert binder == _pins(ROOT / "requirements.txt"), \
        "regenerate binder/requirements.txt (the command is in its header)"
    assert "pip install --no-deps -e ." in (ROOT / "binder" / "postBuild").read_text()
