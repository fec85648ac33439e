"""The book build: staging, stamps, and no local path in the pages."""
import importlib.util
import json
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("build_book",
                                              ROOT / "scripts" / "build_book.py")
build_book = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build_book)


def test_missing_lab_is_an_error_unless_partial(tmp_path):
    empty = tmp_path / "labs"
    empty.mkdir()
    with pytest.raises(SystemExit, match="no executed copy"):
        build_book.stage(empty, tmp_path / "_build")
    src = build_book.stage(empty, tmp_path / "_build", partial=True)
    nb = nbformat.read(next((src / "labs").glob("01_*.ipynb")), 4)
    first = nb.cells[0].source.splitlines()
    assert first[0].startswith("# ") and first[2:5] == [
        "```{lab-stamp}", "{}", "```"]     # not run: the empty record


def test_scrub_and_stamp(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Lab\ntext"),
                nbformat.v4.new_code_cell(f'results_dir = "{ROOT}/_build/x"')]
    f = tmp_path / "x.ipynb"
    nbformat.write(nb, f)
    build_book.scrub(f, [str(ROOT)])
    prov = {"device": "cpu: x86_64, 2 cores", "gpu_count": 0,
            "gpu_model": None, "torch": "2.13.0", "cuda": None, "nccl": None,
            "date": "2026-11-30T12:00:00+00:00", "commit": "abc",
            "profile": "cpu", "preflight": {"status": "ok"}}
    build_book.add_stamp(f, prov, 2)
    out = nbformat.read(f, 4)
    assert str(ROOT) not in f.read_text()
    assert out.cells[1].source == 'results_dir = "_build/x"'
    lines = out.cells[0].source.splitlines()
    assert lines[:3] == ["# Lab", "", "```{lab-stamp}"]
    assert lines[4:] == ["```", "", "text"]
    rec = json.loads(lines[3])
    assert rec["world_size"] == 2 and "preflight" not in rec


def test_world_size_of_a_lab(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps(
        [{"world_size": 2}, {"world_size": 4}, {"world_size": None}]))
    assert build_book.world_size(tmp_path) == 4
    assert build_book.world_size(tmp_path / "nope") is None


def test_no_html_page_shows_the_checkout_path():
    """The strict build of make test (LABKIT_BOOK_BUILT=1), or any build
    there: no page may show where the builder's checkout lives."""
    from test_offline_html import HTML, _built
    _built()
    leaks = [str(f.relative_to(HTML)) for f in HTML.rglob("*.html")
             if str(ROOT) in f.read_text(errors="replace")]
    assert not leaks


def _fake_results(folder: Path, lab: str, status: str = "ok") -> Path:
    """A lab's run folder as the runner leaves it (test data, no run)."""
    folder.mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {lab}")]
    nbformat.write(nb, folder / f"99_{lab}.ipynb")
    (folder / "results.json").write_text(json.dumps([{   # the schema
        "quantity": "fake", "strategy": "test data", "world_size": 1,
        "predicted": 1.0, "measured": 1.0, "ratio": 1.0, "unit": "s",
        "device": "test data", "profile": "cpu"}]))
    (folder / "run.json").write_text(json.dumps(
        {"lab": lab, "status": status, "finished": "2026-01-01T00:00:00",
         "provenance": None}))
    return folder


@pytest.fixture
def bundle(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "bundle_results", ROOT / "scripts" / "bundle_results.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    labs = tmp_path / "labs" / "cpu"
    _fake_results(labs / "fake", "fake")
    # an incompressible notebook: the archive has bytes mid-way to damage
    (labs / "fake" / "99_fake.ipynb").write_bytes(
        (labs / "fake" / "99_fake.ipynb").read_bytes()
        + b" " * 10 + bytes(range(256)) * 400)
    return mod.bundle(labs, "cpu", tmp_path / "b.tar.gz", say=lambda s: 0)


@pytest.mark.parametrize("damage", ["truncated", "overwritten"])
def test_damaged_bundle_is_one_line(bundle, damage, tmp_path):
    data = bytearray(bundle.read_bytes())
    if damage == "truncated":
        data = data[:len(data) * 2 // 3]
    else:
        mid = len(data) // 2
        data[mid:mid + 64] = bytes(64)
    bundle.write_bytes(bytes(data))
    with pytest.raises(SystemExit) as e:
        build_book.unpack(bundle, tmp_path / "_build")
    msg = str(e.value)
    assert "the bundle is damaged" in msg and "\n" not in msg, msg


def test_bundle_unpacks_and_checks(bundle, tmp_path):
    folder, roots = build_book.unpack(bundle, tmp_path / "_build")
    assert roots == [str(ROOT)] and (folder / "fake" / "run.json").exists()
    executed, note = build_book.executed_copy(folder, "fake", "99_fake.ipynb")
    assert executed == folder / "fake" / "99_fake.ipynb"


def test_only_a_complete_run_is_staged(tmp_path):
    """A failed or half-run notebook is never staged as the lab's result:
    the last complete run is, and the build says so."""
    labs = tmp_path / "cpu"
    _fake_results(labs / "fake.20260101-000000", "fake")
    _fake_results(labs / "fake.20260102-000000.failed", "fake", "FAILED")
    half = labs / "fake.20260103-000000.interrupted"
    half.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(), half / "99_fake.ipynb")
    executed, note = build_book.executed_copy(labs, "fake", "99_fake.ipynb")
    assert executed.parent.name == "fake.20260101-000000"
    assert "fake.20260102-000000.failed" in note
    assert "fake.20260103-000000.interrupted" in note
    assert build_book.executed_copy(labs, "other", "99_other.ipynb")[0] \
        is None


# The build as a transaction: one build per checkout, the new site swapped
# in whole. The builder here is a stub (a real book build takes minutes);
# the lock, the guard, the renames and the SIGKILL are real.
book_zh = build_book.book_zh
ENV = dict(__import__("os").environ, PYTHONPATH=str(ROOT))


def _tree(folder: Path) -> dict:
    import hashlib
    return {str(f.relative_to(folder)): hashlib.sha256(
        f.read_bytes()).hexdigest() for f in folder.rglob("*")
        if f.is_file()}


def test_a_second_build_refuses_in_one_line(tmp_path):
    import subprocess
    import sys
    out = tmp_path / "_build"
    with build_book.locked(out):
        p = subprocess.run([sys.executable, "scripts/build_book.py",
                            "--out", str(out), "--no-execute"], cwd=ROOT,
                           env=ENV, capture_output=True, text=True,
                           timeout=60)
    assert p.returncode == 1 and p.stdout == "", p.stdout
    line = p.stderr.strip()
    assert "\n" not in line and "another book build" in line, p.stderr
    assert not (out / "src").exists()       # it staged nothing


STUB = """
import os, sys, time
sys.path.insert(0, {scripts!r})
import book_zh
from pathlib import Path
def stub(src, nxt, jobs, strict, extra):
    site = Path(nxt) / "_build" / "html"
    site.mkdir(parents=True)
    print("building", flush=True)
    for i in range(50):
        (site / f"page{{i}}.html").write_text("new " * 1000)
        time.sleep({pause})
    return 0, 0.0, 0.0
book_zh.sphinx = stub
out = Path({out!r})
sys.exit(book_zh.build(out / "src", out, 1, False, zh=False))
"""


def test_a_killed_build_leaves_the_last_book_whole(tmp_path):
    """SIGKILLed at five moments, from mid-build to after its swap: the
    book at _build/html is the old one whole, or the new one whole."""
    import random
    import shutil
    import signal
    import subprocess
    import sys
    import time
    out = tmp_path / "_build"
    old = out / "html"
    (old / "sub").mkdir(parents=True)
    for i in range(20):
        (old / "sub" / f"old{i}.html").write_text(f"old {i}" * 100)
    before = _tree(old)
    kept = tmp_path / "kept"
    shutil.copytree(old, kept)
    new = {f"page{i}.html" for i in range(50)}
    rng = random.Random(48)
    for pause in (0.004, 0.004, 0.002, 0.0005, 0.0):
        p = subprocess.Popen([sys.executable, "-c", STUB.format(
            scripts=str(ROOT / "scripts"), out=str(out), pause=pause)],
            cwd=ROOT, env=ENV, stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "building"
        time.sleep(rng.uniform(0.0, 0.25))
        p.send_signal(signal.SIGKILL)
        p.wait()
        book_zh.recover(old)                  # what the next build does
        now = _tree(old)
        assert now == before or set(now) == new, (pause, sorted(now))
        if now != before:                     # it finished: the old again
            shutil.rmtree(old)
            shutil.copytree(kept, old)


def test_a_swap_killed_between_its_renames_is_put_back(tmp_path):
    html = tmp_path / "html"
    html.mkdir()
    (html / "index.html").write_text("old")
    html.rename(tmp_path / "html.old")      # the first rename, then killed
    said = book_zh.recover(html)
    assert (html / "index.html").read_text() == "old"
    assert "put back" in said and "\n" not in said
    assert book_zh.recover(html) is None


def test_a_hung_build_is_stopped_in_one_line(tmp_path, monkeypatch, capfd):
    import os
    monkeypatch.setattr(book_zh, "JUPYTER_BOOK_WITH_JOBS",
                        "import os, tempfile, time; print(tempfile."
                        "gettempdir()); print(os.getpid(), flush=True);"
                        " time.sleep(60)  # {jobs}")
    monkeypatch.setattr(book_zh, "TIMEOUT_S", 3.0)
    rc, wall, _ = book_zh.sphinx(tmp_path, tmp_path, 1, False, [])
    lines = capfd.readouterr().out.splitlines()
    assert rc == 124 and wall < 15
    assert "stopped after 3 s" in lines[-1]
    pid = int(lines[-2])
    assert lines[-3] == str(tmp_path / ".tmp")   # connection files: here
    assert not os.path.exists(f"/proc/{pid}") or open(
        f"/proc/{pid}/stat").read().split(") ")[1][0] == "Z"


def test_a_dead_kernel_is_one_line_naming_the_page():
    import sys
    sys.path.insert(0, str(ROOT / "scripts"))
    from book_transaction import dead_kernels
    frames = ["Traceback (most recent call last):"] + [
        f'  File "/x/nbclient/client.py", line {i}, in run' for i in
        range(48)] + ["    raise DeadKernelError(\"Kernel died\")",
                      "nbclient.exceptions.DeadKernelError: Kernel died"]
    log = ["reading sources... [ 40%] book/03_sharding",
           "/src/book/03_sharding.md: WARNING: Executing notebook failed:"
           " DeadKernelError [mystnb.exec]", *frames, "done"]
    out = list(dead_kernels(log))
    assert out[:2] == log[:2] and out[-1] == "done" and len(out) == 4
    assert out[2].startswith("book: the kernel of book/03_sharding died")
    other = ["Traceback (most recent call last):", '  File "x", line 1',
             "ZeroDivisionError: division by zero", "after"]
    assert list(dead_kernels(other)) == other     # a cell's own error
