"""Build the HTML book into _build/html from a staged copy of the sources.

    python scripts/build_book.py --strict                      # labs as committed
    python scripts/build_book.py --labs-from _build/labs/cpu   # executed labs
    python scripts/build_book.py --student    # _build/student/_build/html

The book's sources (``_config.yml``, ``_toc.yml``, ``book/``, ``labs/*.ipynb``)
are copied to ``_build/src``; with ``--labs-from``, each lab notebook there is
replaced by its executed copy from the lab runner, so the book shows the
outputs of the run that was measured and the labs are not executed twice.
Chapters are executed at build time (cheap: pure formulas and plots). The
build folder is cleaned first; ``--strict`` adds ``-W -n --keep-going``.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from labkit.launch import checkout_pythonpath  # noqa: E402

SOURCES = ["_config.yml", "_toc.yml", "book", "labs"]


def stage(labs_from: Path | None, out: Path) -> Path:
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
    if labs_from:
        for nb in sorted((src / "labs").glob("[0-9]*_*.ipynb")):
            name = nb.stem.partition("_")[2]
            executed = labs_from / name / nb.name
            if not executed.exists():
                raise SystemExit(f"no executed copy of {nb.name} in {labs_from}: "
                                 f"run scripts/run_labs.py first")
            shutil.copy2(executed, nb)
    return src


def student_edition(src: Path) -> None:
    """The student edition: exercises without their solutions, no copy of
    the page sources (they hold the solutions), no instructor guide."""
    config, toc = src / "_config.yml", src / "_toc.yml"
    toc.write_text(toc.read_text().replace("  - file: book/instructor\n", ""))
    cfg = yaml.safe_load(config.read_text())
    cfg["sphinx"].setdefault("config", {}).update(
        hide_solutions=True, html_copy_source=False, html_show_sourcelink=False)
    cfg.setdefault("html", {})["use_download_button"] = False
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))


def main(argv=None) -> int:
    os.environ["PYTHONPATH"] = checkout_pythonpath()  # kernels: this labkit
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--labs-from", type=Path)
    ap.add_argument("--strict", action="store_true")
    ap.add_argument("--student", action="store_true",
                    help="student edition (solutions removed), by default "
                    "in _build/student/_build")
    ap.add_argument("--out", type=Path, default=ROOT / "_build",
                    help="build folder (default _build): html/ goes there")
    a = ap.parse_args(argv)
    out = (ROOT / "_build" / "student" / "_build" if a.student
           and a.out == ROOT / "_build" else a.out).resolve()
    if out.name != "_build":  # jupyter-book writes to <path-output>/_build
        ap.error("--out must be a folder named _build, e.g. /tmp/me/_build")
    src = stage(a.labs_from.resolve() if a.labs_from else None, out)
    if a.student:
        student_edition(src)
    for d in ("html", ".doctrees", "jupyter_execute"):
        shutil.rmtree(out / d, ignore_errors=True)
    cmd = [str(Path(sys.executable).with_name("jupyter-book")), "build",
           str(src), "--builder", "html", "--path-output", str(out.parent), "--all"]
    if a.strict:
        cmd += ["-W", "-n", "--keep-going"]
    print(" ".join(cmd), flush=True)
    rc = subprocess.call(cmd, cwd=ROOT)
    if rc == 0:
        print(f"book: {out / 'html' / 'index.html'}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
