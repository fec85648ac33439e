"""labkit.results.resultsfile where results are read: a truncated, garbage,
misshapen, missing or later-damaged results.json is named in one line;
the book build stops unless --partial; a bundle of it is refused; the
runner stores the sums when the lab completes; a full disk never leaves
a truncated archive under the bundle's name."""
import errno
import importlib.util
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from labkit.results import resultsfile as RF

ROOT = Path(__file__).resolve().parent.parent
GOOD = [{"quantity": "q", "strategy": "s", "world_size": 2,
         "predicted": 1.0, "measured": 1.0, "ratio": 1.0, "unit": "s",
         "device": "test data", "profile": "cpu"}]


def _script(name):
    spec = importlib.util.spec_from_file_location(
        name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


DAMAGED = {
    "truncated": json.dumps(GOOD)[:40], "garbage": "\x00\xffjunk",
    "empty": "", "object": '{"a": 1}', "empty_list": "[]",
    "not_records": "[1, 2]", "no_field": json.dumps([{"quantity": "q"}]),
    "string_number": json.dumps([{**GOOD[0], "measured": "12"}]),
    "bool_world": json.dumps([{**GOOD[0], "world_size": True}]),
    "deep": "[" * 100_000 + "]" * 100_000,
}


@pytest.mark.parametrize("kind", sorted(DAMAGED))
def test_a_damaged_file_is_one_line_naming_it(kind, tmp_path):
    f = tmp_path / "results.json"
    f.write_text(DAMAGED[kind], errors="surrogateescape")
    with pytest.raises(RF.ResultsError) as e:
        RF.read(f)
    assert str(f) in str(e.value) and "\n" not in str(e.value)


def test_missing_and_good(tmp_path):
    with pytest.raises(RF.ResultsError, match="results.json: missing"):
        RF.read(tmp_path / "results.json")
    (tmp_path / "results.json").write_text(json.dumps(GOOD))
    assert RF.read(tmp_path / "results.json") == GOOD


def run_folder(base: Path, lab: str, notebook: str) -> Path:
    """A complete run as the runner leaves it, sums stored in run.json."""
    d = base / lab
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps(GOOD))
    shutil.copy(ROOT / "labs" / notebook, d / notebook)
    sums = RF.checksums(d, ("results.json", notebook))
    (d / "run.json").write_text(json.dumps(
        {"lab": lab, "status": "ok", "finished": "2026-12-01T00:00:00",
         "sha256": sums}))
    return d


def test_damaged_after_completion_is_named(tmp_path):
    d = run_folder(tmp_path, "memory", "01_memory.ipynb")
    assert RF.verify(d)["results.json"]
    rec = json.loads((d / "results.json").read_text())
    rec[0]["measured"] = 2.0            # valid, but not what the lab wrote
    (d / "results.json").write_text(json.dumps(rec))
    with pytest.raises(RF.ResultsError, match="SHA-256 differs"):
        RF.verify(d)


def test_the_book_build_stops_on_a_truncated_file_unless_partial(
        tmp_path, capsys):
    build_book = _script("build_book")
    labs = tmp_path / "labs" / "cpu"
    d = run_folder(labs, "memory", "01_memory.ipynb")
    (d / "results.json").write_text(json.dumps(GOOD)[:30])
    with pytest.raises(SystemExit) as e:
        build_book.stage(labs, tmp_path / "_build")
    line = str(e.value)
    assert str(d / "results.json") in line and "--partial" in line
    assert "\n" not in line
    src = build_book.stage(labs, tmp_path / "_build", partial=True)
    assert "shown as committed (--partial)" in capsys.readouterr().out
    assert (src / "labs" / "01_memory.ipynb").exists()


def test_a_bundle_of_a_damaged_run_is_refused(tmp_path):
    bundle_results = _script("bundle_results")
    labs = tmp_path / "cpu"
    d = run_folder(labs, "memory", "01_memory.ipynb")
    out = tmp_path / "b.tar.gz"
    for damage in ("truncate", "delete"):
        if damage == "truncate":
            (d / "results.json").write_text(json.dumps(GOOD)[:30])
        else:
            (d / "results.json").unlink()
        with pytest.raises(SystemExit, match="bundle refused: .*results"
                                             ".json: (damaged|missing)"):
            bundle_results.bundle(labs, "cpu", out, say=lambda s: None)
        assert not out.exists()


def test_a_bundle_holds_the_sums_stored_at_completion(tmp_path):
    bundle_results = _script("bundle_results")
    labs = tmp_path / "cpu"
    d = run_folder(labs, "memory", "01_memory.ipynb")
    out = bundle_results.bundle(labs, "cpu", tmp_path / "b.tar.gz",
                                say=lambda s: None)
    with tarfile.open(out) as tar:
        m = json.load(tar.extractfile("cpu/manifest.json"))
    assert m["files"]["cpu/memory/results.json"] == RF.stored(d)[
        "results.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.tar.gz", "cpu"]


def test_a_full_disk_leaves_no_archive_under_its_name(tmp_path,
                                                      monkeypatch):
    bundle_results = _script("bundle_results")
    labs = tmp_path / "cpu"
    run_folder(labs, "memory", "01_memory.ipynb")
    out = tmp_path / "b.tar.gz"
    out.write_bytes(b"an older, complete bundle")

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(out))
    monkeypatch.setattr(tarfile.TarFile, "addfile", full)
    with pytest.raises(SystemExit, match=f"bundle refused: disk full at"):
        bundle_results.main(["--profile", "cpu", "--from", str(tmp_path),
                             "--out", str(out)])
    assert out.read_bytes() == b"an older, complete bundle"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.tar.gz", "cpu"]


def test_the_runner_stores_the_sums_and_refuses_a_bad_shape(
        tmp_path, monkeypatch):
    import papermill
    run_labs = _script("run_labs")

    def lab(src, dest, parameters, cwd, **kw):
        shutil.copy(src, dest)
        out = Path(cwd) / parameters["results_dir"] / "results.json"
        out.write_text(json.dumps(GOOD if shape == "good" else {"x": 1}))
    monkeypatch.setattr(papermill, "execute_notebook", lab)
    shape = "good"
    status, _, detail = run_labs.run_lab(
        "collectives", run_labs.discover()["collectives"], "cpu", {},
        tmp_path, 0.1, None)
    assert status == "ok", detail
    assert RF.verify(tmp_path / "cpu" / "collectives").keys() >= {
        "results.json", "02_collectives.ipynb", "parameters.json"}
    shape = "bad"
    status, _, detail = run_labs.run_lab(
        "collectives", run_labs.discover()["collectives"], "cpu", {},
        tmp_path, 0.1, None)
    assert status == "FAILED" and "damaged" in detail
