"""Build the HTML book into _build/html from a staged copy of the sources.

    python scripts/build_book.py --strict                      # labs as committed
    python scripts/build_book.py --labs-from _build/labs/cpu   # executed labs
    python scripts/build_book.py --student    # _build/student/_build/html
    python scripts/build_book.py --labs-from labs-gpu8-....tar.gz  # a bundle
    python scripts/build_book.py --english-only   # no _build/html/zh
    python scripts/build_book.py --pages book/intro book/01_memory  # a look

Both editions are built (``scripts/book_zh.py``): English at ``_build/html``,
Chinese at ``_build/html/zh``, each chapter executed once for both.

The book's sources (``_config.yml``, ``_toc.yml``, ``book/``, ``labs/*.ipynb``)
are copied to ``_build/src``; with ``--labs-from``, each lab notebook there is
replaced by its executed copy from the lab runner, so the book shows the
outputs of the run that was measured and the labs are not executed twice.
Chapters are executed at build time (cheap: pure formulas and plots), by
the English build; the Chinese one reads their outputs from the same
jupyter-cache. The build folder is cleaned first; ``--strict`` adds ``-W
-n --keep-going`` to both.

``--labs-from`` also takes an archive of ``scripts/bundle_results.py``;
with ``--partial`` a lab missing from it is shown as committed. Only a
lab's last complete run is staged (``labkit.results.labruns``), never a failed,
interrupted or unfinished one, and the build says which run it used when
a newer one was left out; a truncated or damaged bundle is one line. Each lab
page starts with its stamp (``labkit.results.provenance.stamp``, said in the
page's language by ``book/_ext/lab_stamp.py``: where and with what it
was measured, or that it was not run), and the absolute path of
this checkout (and of the node's, from a bundle) is taken out of the
staged notebooks, so no published page shows a local path.

Each lab page links its assignment as handed out to students (the
otter master without solutions or hidden tests: ``stage_handouts``), never
the master.

Each staged run is verified where it is read (``labkit.results.resultsfile``): its
``results.json`` must hold the documented records and its files the
SHA-256 the runner stored when the lab completed. A damaged or missing
file is named in one line and stops the build; with
``--partial`` that lab is shown as committed instead, and the line says
so. A full or read-only build folder is one line too ("disk full at
PATH").

A build is a transaction: one build per checkout at a time (the lock
``_build/.html.book.lock``, ``labkit.results.runlock``; a second build refuses in
one line, or waits with ``--wait``), and the new site is made beside the
old one and swapped in by renames only when complete
(``scripts/book_transaction.py``): a build that fails or is killed leaves
the last good book whole. Each jupyter-book run is bounded
(``book_zh.TIMEOUT_S``) and dies with the build, kernels included; a
chapter whose kernel died is one line naming it.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import sys
import tarfile
import zlib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from labkit import lazy_grammar  # noqa: E402,F401  (before nbformat)
from labkit import disk
from labkit.results import labruns, resultsfile, runlock  # noqa: E402
from labkit.launch import checkout_pythonpath  # noqa: E402
from labkit.results.provenance import of_notebook, record  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
import book_zh  # noqa: E402  (the builds of the two editions)

SOURCES = ["_config.yml", "_toc.yml", "book", "labs"]



def unpack(labs_from: Path, out: Path) -> tuple[Path, list[str]]:
    """A results folder as is, or a bundle unpacked under ``out``: the
    folder of lab results, and the checkout paths to take out of pages."""
    if labs_from.is_dir():
        return labs_from, []
    with open(labs_from, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    if not gz and not tarfile.is_tarfile(labs_from):
        raise SystemExit(f"--labs-from {labs_from}: neither a folder nor a "
                         "bundle (.tar.gz of scripts/bundle_results.py)")
    damaged = (f"--labs-from {labs_from}: the bundle is damaged "
               "({}); copy it again, or make it again with "
               "scripts/bundle_results.py")
    dest = out / "bundle"
    shutil.rmtree(dest, ignore_errors=True)
    try:
        if gz:   # read it whole: gzip checks its length and CRC at the end
            with gzip.open(labs_from) as g:
                while g.read(1 << 20):
                    pass
        with tarfile.open(labs_from) as tar:
            tar.extractall(dest, filter="data")
    except (EOFError, OSError, tarfile.TarError, ValueError,
            zlib.error) as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SystemExit(damaged.format(why)) from None
    manifest = next(dest.glob("*/manifest.json"), None)
    if manifest is None:
        raise SystemExit(f"{labs_from} has no <profile>/manifest.json")
    meta = json.loads(manifest.read_text())
    for arcname, digest in meta.get("files", {}).items():
        f = dest / arcname
        if not f.is_file() or hashlib.sha256(
                f.read_bytes()).hexdigest() != digest:
            raise SystemExit(damaged.format(f"{arcname} does not match "
                                            "its SHA-256"))
    for lab, note in sorted(meta.get("runs", {}).items()):
        print(f"bundle {labs_from.name}: {note}")
    return manifest.parent, [meta["root"]]


def executed_copy(labs_from: Path, name: str,
                  notebook: str) -> tuple[Path | None, str]:
    """The executed notebook of ``name``'s last complete run, and a line
    saying which run that is (None: no complete run)."""
    run, note = labruns.last_complete(labs_from, name)
    if run is None or not (run / notebook).exists():
        return None, note
    resultsfile.verify(run)     # ResultsError: a damaged or missing file
    return run / notebook, note


def world_size(folder: Path) -> int | None:
    """The most processes of one record of a lab's results.json."""
    try:
        recs = json.loads((folder / "results.json").read_text())
    except (OSError, ValueError, RecursionError):
        return None
    sizes = [r.get("world_size") for r in recs if isinstance(r, dict)] \
        if isinstance(recs, list) else []
    return max((s for s in sizes if isinstance(s, int)), default=None)


def add_stamp(nb: Path, prov: dict | None, world_size: int | None) -> None:
    """Put the stamp under the page title (the first markdown cell's H1):
    a ``{lab-stamp}`` directive holding the provenance record as JSON
    (``labkit.results.provenance.record``), which ``book/_ext/lab_stamp.py`` says
    in the build's language (one staged notebook for both editions)."""
    import nbformat
    book = nbformat.read(nb, as_version=4)
    cell = next(c for c in book.cells if c.cell_type == "markdown")
    head, sep, rest = cell.source.partition("\n")
    data = json.dumps(record(prov, world_size), sort_keys=True)
    cell.source = f"{head}\n\n```{{lab-stamp}}\n{data}\n```\n{sep}{rest}"
    nbformat.write(book, nb)


def scrub(nb: Path, roots: list[str]) -> None:
    """Replace absolute checkout paths by paths relative to the project."""
    text = nb.read_text()
    for root in roots:
        text = text.replace(root.rstrip("/") + "/", "").replace(root, ".")
    nb.write_text(text)


def stage(labs_from: Path | None, out: Path, partial: bool = False) -> Path:
    src = out / "src"
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    for name in SOURCES:
        p = ROOT / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=shutil.ignore_patterns(
                "__pycache__", ".ipynb_checkpoints", "profiles"))
        else:
            shutil.copy2(p, src / name)
    roots = [str(ROOT)]
    if labs_from:
        labs_from, node_roots = unpack(labs_from, out)
        roots += node_roots
        for run in labruns.label_interrupted(labs_from):
            print(labruns.said(run))
    for nb in sorted((src / "labs").glob("[0-9]*_*.ipynb")):
        name = nb.stem.partition("_")[2]
        try:
            executed, note = executed_copy(labs_from, name, nb.name) \
                if labs_from else (None, "")
        except resultsfile.ResultsError as e:
            if not partial:
                raise SystemExit(f"build stopped: {e}; rerun the lab, or "
                                 "pass --partial to show it as committed")
            print(f"{e}: {nb.name} shown as committed (--partial)")
            executed, note = None, str(e)
        prov, n = None, None
        if executed:
            if executed.parent.name != name or "left out" in note:
                print(note)
            shutil.copy2(executed, nb)
            prov, n = of_notebook(nb), world_size(executed.parent)
        elif labs_from and not partial:
            raise SystemExit(f"no executed copy of {nb.name} in {labs_from}"
                             f" ({note}): run scripts/run_labs.py first")
        scrub(nb, roots)
        add_stamp(nb, prov, n)
    return src


def stage_handouts(src: Path) -> list[Path]:
    """Each lab's assignment as handed out (no solutions, no hidden
    tests) in ``src/assignments``, where the lab page's "Assignment" cell
    links it (a download): scripts/handouts.py."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import handouts
    return handouts.handouts(src / "assignments")


def student_edition(src: Path) -> None:
    """The student edition: exercises without their solutions, no copy of
    the page sources (they hold the solutions), no instructor guide."""
    config, toc = src / "_config.yml", src / "_toc.yml"
    toc.write_text(toc.read_text().replace("  - file: book/instructor\n", ""))
    cfg = yaml.safe_load(config.read_text())
    cfg["sphinx"].setdefault("config", {}).update(
        hide_solutions=True, html_copy_source=False, html_show_sourcelink=False)
    # No "Download source file" (.md/.ipynb) link to the _sources/ this
    # edition does not have: a theme option that _config.yml's html: section
    # does not reach, so merged into the theme's options here (the .pdf
    # print button goes with it).
    cfg["sphinx"]["recursive_update"] = True
    cfg["sphinx"]["config"].setdefault("html_theme_options", {})[
        "use_download_button"] = False
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))


def locked(out: Path, wait: bool = False):
    """The book build's lock on ``out`` (``runlock.RunnerBusy``: held)."""
    return runlock.hold(out / "html", wait=wait, kind="book", say=lambda
                        line: print(f"build_book: {line}", flush=True))


def main(argv=None) -> int:
    os.environ["PYTHONPATH"] = checkout_pythonpath()  # kernels: this labkit
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--labs-from", type=Path)
    ap.add_argument("--strict", action="store_true")
    # jupyter-book's CLI has no --jobs: its build_sphinx does. Two readers
    # execute two chapters at once (each chapter runs in its own kernel).
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                    help="chapters read (and executed) at once (default: "
                    "2, or 1 on one core)")
    ap.add_argument("--student", action="store_true",
                    help="student edition (solutions removed), by default "
                    "in _build/student/_build")
    ap.add_argument("--no-execute", action="store_true",
                    help="do not run the chapters (a quick look at the labs' "
                    "pages; the chapters' computed numbers are missing)")
    ap.add_argument("--partial", action="store_true",
                    help="labs missing from --labs-from: shown as committed")
    ap.add_argument("--english-only", action="store_true",
                    help="the English edition alone (no _build/html/zh)")
    ap.add_argument("--pages", nargs="+",
                    help="only these pages (the first is the root) and no "
                    "handouts: a quick look while writing or translating")
    ap.add_argument("--out", type=Path, default=ROOT / "_build",
                    help="build folder (default _build): html/ goes there")
    ap.add_argument("--wait", action="store_true",
                    help="another build holds this folder: wait for it "
                    "(default: refuse)")
    a = ap.parse_args(argv)
    out = (ROOT / "_build" / "student" / "_build" if a.student
           and a.out == ROOT / "_build" else a.out).resolve()
    if out.name != "_build":  # jupyter-book writes to <path-output>/_build
        ap.error("--out must be a folder named _build, e.g. /tmp/me/_build")
    try:
        with locked(out, a.wait):
            return _build(a, out)
    except runlock.RunnerBusy as e:
        raise SystemExit(f"build_book: {e}") from None


def _build(a, out: Path) -> int:
    """The build itself, under the lock."""
    try:
        with disk.said(out):
            src = stage(a.labs_from.resolve() if a.labs_from else None,
                        out, a.partial)
    except disk.DiskError as e:
        raise SystemExit(f"build stopped: {e}") from None
    if a.pages:     # a quick look: no handouts (the labs' links then warn)
        book_zh.cut_toc(src / "_toc.yml", a.pages)
    else:
        stage_handouts(src)
    if a.student:
        student_edition(src)
    if a.no_execute:
        cfg = src / "_config.yml"
        cfg.write_text(cfg.read_text().replace("execute_notebooks: force",
                                               "execute_notebooks: \"off\""))
    return book_zh.build(src, out, a.jobs, a.strict, zh=not a.english_only)


if __name__ == "__main__":
    sys.exit(main())
