"""make stops in one line, before installing anything, on a Python the
course does not support (scripts/check_python.sh)."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _fake_python(tmp_path, version):
    """An interpreter that says it is ``version`` (nothing else works)."""
    f = tmp_path / f"python{version}"
    f.write_text(f"#!/bin/sh\necho {version}\n")
    f.chmod(0o755)
    return f


def test_this_interpreter_is_supported():
    r = subprocess.run(["sh", "scripts/check_python.sh", sys.executable],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and not r.stderr


@pytest.mark.skipif(not shutil.which("make"), reason="no make")
@pytest.mark.parametrize("version", ["3.10", "3.14"])
def test_make_stops_in_one_line_before_installing(tmp_path, version):
    venv = tmp_path / "venv"
    r = subprocess.run(["make", "setup", f"PYTHON={_fake_python(tmp_path, version)}",
                        f"VENV={venv}"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and not venv.exists()
    # make adds its own "make: *** [...] Error 2" (make[1]: under make)
    lines = [l for l in r.stderr.splitlines()
             if not re.match(r"make(\[\d+\])?: \*\*\* ", l)]
    assert len(lines) == 1, r.stderr
    assert f"Python {version}" in lines[0] and "3.11 to 3.13" in lines[0]
    assert "make PYTHON=" in lines[0]


def test_missing_interpreter_is_one_line(tmp_path):
    r = subprocess.run(["sh", "scripts/check_python.sh",
                        str(tmp_path / "nope")], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
