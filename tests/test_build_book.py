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
    assert first[0].startswith("# ") and "Not run in this build" in first[3]


def test_scrub_and_stamp(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Lab\ntext"),
                nbformat.v4.new_code_cell(f'results_dir = "{ROOT}/_build/x"')]
    f = tmp_path / "x.ipynb"
    nbformat.write(nb, f)
    build_book.scrub(f, [str(ROOT)])
    build_book.add_stamp(f, "CPU profile (gloo, 2 processes)")
    out = nbformat.read(f, 4)
    assert str(ROOT) not in f.read_text()
    assert out.cells[1].source == 'results_dir = "_build/x"'
    assert out.cells[0].source.startswith("# Lab\n\n```{note}\nCPU profile")


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
