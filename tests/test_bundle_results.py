"""A CPU run, bundled, builds the book elsewhere: stamps, no local paths.

One lab goes through the runner (its notebook is not executed again: nbval
executes every lab once per test run); the others are missing from the bundle and
the build (``--partial``) shows them as committed, stamped "not run". The
chapters are not executed here (``--no-execute``): make test's strict build
executes them, and tests/test_build_book.py checks that build's pages for
local paths too.
"""
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAB = "collectives"


def _script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" /
                                                  f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _results_without_running(src, dest, parameters, cwd, **kw):
    """Stands in for papermill: a lab runs once per test run, under nbval
    (DEVELOPERS.md), so here only the runner's work around it is real: the
    copy of the notebook, run.json, provenance. The one record is test
    data, labelled so, and never leaves tmp_path."""
    from labkit.lab import Results
    shutil.copy(src, dest)
    res = Results(LAB, profile=parameters["profile"],
                  results_dir=Path(cwd) / parameters["results_dir"])
    res.add("bundle_test", "not a measurement", 2, 1.0, 1.0, "s",
            device="test data")
    res.save()


def test_bundle_builds_the_book_with_stamps(tmp_path, monkeypatch):
    import papermill
    monkeypatch.setattr(papermill, "execute_notebook",
                        _results_without_running)
    run_labs = _script("run_labs")
    labs = tmp_path / "labs"
    status, _, detail = run_labs.run_lab(LAB, run_labs.discover()[LAB],
                                         "cpu", {}, labs, 0.1, None)
    assert status == "ok", detail
    rj = json.loads((labs / "cpu" / LAB / "run.json").read_text())
    assert rj["minutes"]["measured"] >= 0 and rj["minutes"]["predicted"] == 0.1
    assert rj["provenance"]["preflight"]["status"] == "not run"
    recs = json.loads((labs / "cpu" / LAB / "results.json").read_text())
    assert all(r["provenance"]["commit"] for r in recs)

    archive = tmp_path / "bundle.tar.gz"
    assert _script("bundle_results").main(
        ["--profile", "cpu", "--from", str(labs), "--out", str(archive)]) == 0
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert f"cpu/{LAB}/results.json" in names and "cpu/manifest.json" in names
    assert not any("input-" in n for n in names)

    out = tmp_path / "_build"
    build = subprocess.run([sys.executable, "scripts/build_book.py",
                            "--labs-from", str(archive), "--partial",
                            "--no-execute", "--english-only", "--out", str(out)], cwd=ROOT, capture_output=True,
                           text=True, timeout=900)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    html = out / "html"
    pages = sorted((html / "labs").glob("[0-9]*_*.html"))
    assert pages
    for page in pages:
        text = page.read_text()
        if LAB in page.name:
            assert re.search(r"CPU profile \(gloo, \d+ processes\)", text)
        else:
            assert "Not run in this build" in text, page.name
    leaks = [str(f.relative_to(html)) for f in html.rglob("*.html")
             if str(ROOT) in f.read_text(errors="replace")]
    assert not leaks
