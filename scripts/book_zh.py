"""The two editions of the book: English, then Chinese, chapters run once.

    python scripts/build_book.py [--strict] [--student]  # both (make book)
    python scripts/build_book.py --pages book/intro book/01_memory

``scripts/build_book.py`` stages the sources (labs, stamps, handouts, the
student edition's changes) and calls :func:`build`: English to
``_build/html``, Chinese to ``_build/html/zh``; every page links its twin
in the other language (``book/_ext/lang_switch.py``). A quick look
while translating is ``build_book.py --pages``: :func:`cut_toc` cuts the
table of contents to those pages and no assignment handouts are staged.

Why two Sphinx builds of one staged copy: Sphinx translates a page while
reading it (gettext catalogs, ``locale/zh_CN/LC_MESSAGES/<page>.po``, see
``scripts/zh_catalogs.py``), and a build has one language. The chapters'
code cells run once: the English build executes them into a jupyter-cache
made empty first (so the numbers are today's, as under ``force``), and the
Chinese build takes every chapter's outputs from that cache, because its
code cells are the same cells. So each glued number is computed once, by
the same code, for both languages, and no code cell is copied. A chapter
the English build could not execute stops the build before the Chinese
one (it would execute it again). The Chinese-only pages (the glossary,
``locale/zh_CN/pages/``) join the Chinese table of contents after the
intro. ``build(..., zh=False)`` (``build_book.py --english-only``) is the
English edition alone, executed under ``force`` as before.
"""
from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from book_transaction import dead_kernels, recover, swap_in  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ZH = ROOT / "locale" / "zh_CN"
# A whole jupyter-book run at most (each chapter also has execute.timeout
# in _config.yml): a strict build takes about 100 CPU-s on 2 cores.
TIMEOUT_S = float(os.environ.get("LABKIT_BOOK_TIMEOUT_S", 1800))

# Three extensions the book uses do not declare themselves parallel-safe, and
# Sphinx then reads serially with a warning (-W: an error). All three are:
# sphinx_multitoc_numbering (Jupyter Book's own) replaces
# TocTreeCollector.assign_section_numbers, which runs in the main process
# after the parallel reads are merged; sphinx-mathjax-offline copies MathJax
# at build-finished; sphinx_jupyterbook_latex only transforms one page at
# a time. Checked (2026-12-01): a serial and a parallel build give the same
# pages, section numbers and search index, but for chapter 7's live
# profiler timings and pandas' random table ids. On 2 cores the strict
# build takes 58 s instead of 84-98 s.
PARALLEL_SAFE = ("sphinx_multitoc_numbering", "sphinx-mathjax-offline",
                 "sphinx_jupyterbook_latex")
JUPYTER_BOOK_WITH_JOBS = """
import labkit.lazy_grammar  # jsonschema's IRI grammar: built when used
import importlib, sys, jupyter_book.sphinx as s
build = s.build_sphinx
s.build_sphinx = lambda *a, **k: build(*a, **dict(k, jobs={jobs}))
def declared(setup):
    return lambda app: dict(setup(app) or {{}}, parallel_read_safe=True,
                            parallel_write_safe=True)
for name in %r:
    m = importlib.import_module(name)
    m.setup = declared(m.setup)
import sphinx.builders as b    # one page a task: chapter 1 alone takes 20 s
b.make_chunks = lambda docnames, nproc, maxbatch=10: [[d] for d in docnames]
from jupyter_book.cli.main import main
sys.argv[0] = "jupyter-book"
main()
""" % (PARALLEL_SAFE,)


def cut_toc(toc_path: Path, keep: list[str]) -> None:
    """Keep only the pages ``keep`` (and the root) in the table."""
    toc = yaml.safe_load(toc_path.read_text())
    chapters = []
    for ch in toc.get("chapters", []):
        secs = [s for s in ch.get("sections", []) if s["file"] in keep]
        if ch["file"] in keep:
            chapters.append(dict(ch, sections=secs) if secs else
                            {"file": ch["file"]})
        chapters += [{"file": s["file"]} for s in secs
                     if ch["file"] not in keep]
    toc["chapters"] = chapters
    toc_path.write_text(yaml.safe_dump(toc, sort_keys=False))


def zh_only_pages(src: Path) -> list[str]:
    """Copy the Chinese-only pages into the staged book/ and list them."""
    pages = []
    for p in sorted((ZH / "pages").glob("*.md")):
        shutil.copy2(p, src / "book" / p.name)
        pages.append(f"book/{p.stem}")
    return pages


def configs(src: Path, cache: Path, zh_pages: list[str]) -> Path:
    """The English _config.yml (cache mode) and the Chinese one."""
    cfg = yaml.safe_load((src / "_config.yml").read_text())
    if cfg["execute"]["execute_notebooks"] == "force":
        cfg["execute"].update(execute_notebooks="cache", cache=str(cache))
    sph = cfg["sphinx"]["config"]
    sph.update(gettext_compact=False, lang_switch="zh",
               lang_switch_skip=[])
    (src / "_config.yml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    zh = yaml.safe_load((ZH / "config.yml").read_text())
    cfg["title"] = zh.get("title", cfg["title"])
    sph.update(language="zh_CN", locale_dirs=["locale"], lang_switch="en",
               lang_switch_skip=zh_pages, **zh.get("sphinx", {}))
    zh_cfg = src / "_config_zh.yml"
    zh_cfg.write_text(yaml.safe_dump(cfg, sort_keys=False))
    toc = yaml.safe_load((src / "_toc.yml").read_text())
    toc["chapters"] = [{"file": p} for p in zh_pages] + toc["chapters"]
    (src / "_toc_zh.yml").write_text(yaml.safe_dump(toc, sort_keys=False))
    return zh_cfg


def new_cache(cache: Path) -> None:
    """Create the empty jupyter-cache (its sqlite tables) here, before the
    build: two parallel readers that each find no database both create
    its tables, and the second fails ("table settings already exists")."""
    from jupyter_cache import get_cache
    get_cache(cache).list_cache_records()


def not_cached(cache: Path) -> list[str]:
    """Pages the English build tried to execute and did not cache (an
    error or a timeout): under ``cache`` mode the Chinese build would run
    them again."""
    if not cache.exists():
        return []
    from jupyter_cache import get_cache
    return sorted(Path(r.uri).name for r in get_cache(cache).list_unexecuted())


def sphinx(src: Path, out: Path, jobs: int, strict: bool,
           extra: list[str]) -> tuple[int, float, float]:
    """One jupyter-book build: (return code, wall s, CPU s of children).

    It runs under ``labkit.launch.guard``: killed with this process (even
    by SIGKILL, kernels included), and stopped in one line after
    ``TIMEOUT_S`` (a kernel that hangs rather than dies)."""
    cmd = [sys.executable, "-c", JUPYTER_BOOK_WITH_JOBS.format(jobs=jobs),
           "build", str(src), "--builder", "html", "--path-output", str(out),
           "--all", *extra]
    if strict:
        cmd += ["-W", "-n", "--keep-going"]
    print("jupyter-book " + " ".join(cmd[3:]) + f"  ({jobs} jobs)",
          flush=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    guard = [sys.executable, "-m", "labkit.launch.guard", "--owner",
             str(os.getpid()), "--grace", "2", "--", *cmd]
    # the kernels' connection files (ports, HMAC key) go to a private
    # temporary folder in the build's own, removed by the next build,
    # not the system's, where a killed build would leave them
    tmp = Path(out) / ".tmp"
    tmp.mkdir(mode=0o700, parents=True, exist_ok=True)
    proc = subprocess.Popen(guard, cwd=ROOT, start_new_session=True,
                            env=dict(os.environ, TMPDIR=str(tmp),
                                     IPYTHONDIR=str(ipython_dir(out))),
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            errors="replace")
    reader = threading.Thread(target=_relay, args=(proc.stdout,),
                              daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout=TIMEOUT_S)
        reader.join(timeout=10)
    except subprocess.TimeoutExpired:
        proc.terminate()
        proc.wait()
        print(f"book: jupyter-book stopped after {TIMEOUT_S:.0f} s "
              f"(LABKIT_BOOK_TIMEOUT_S): a chapter's kernel hung", flush=True)
        rc = 124
    except BaseException:     # Ctrl-C, SIGTERM: nothing outlives the build
        proc.terminate()
        proc.wait()
        raise
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime
                                                + before.ru_stime)
    return rc, time.perf_counter() - t0, cpu


def ipython_dir(out: Path) -> Path:
    """The chapters' kernels' IPython folder, private to the build: its
    profile loads ``labkit.twins``, so every table and figure a chapter
    shows carries its Chinese twin (drawn by the Chinese build)."""
    d = Path(out) / ".ipython"
    conf = d / "profile_default" / "ipython_kernel_config.py"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text('c.InteractiveShellApp.extensions = ["labkit.twins"]\n')
    return d


def _relay(stream) -> None:
    """The build's output to ours, a dead kernel's traceback as one line
    (``book_transaction.dead_kernels``)."""
    for line in dead_kernels(stream):
        print(line, flush=True)


def build(src: Path, out: Path, jobs: int, strict: bool,
          zh: bool = True) -> int:
    """Build the staged ``src`` into ``out/html`` (English) and, with
    ``zh``, ``out/html/zh`` (Chinese); print each build's wall and CPU
    seconds. The exit code of the first build that failed, else 0.

    The new site is made in ``out/next/_build`` (with its doctrees,
    executed chapters and jupyter-cache) and swapped in whole
    (:func:`swap_in`) only when both editions are complete: a failed or
    killed build leaves the last good book at ``out/html``."""
    said = recover(out / "html")
    if said:
        print(said, flush=True)
    nxt = out / "next"
    for d in (nxt, out / ".doctrees", out / "jupyter_execute", out / "zh",
              out / ".jupyter_cache"):   # the last three: older layouts
        shutil.rmtree(d, ignore_errors=True)
    site = nxt / "_build"
    if not zh:
        rc, wall, cpu = sphinx(src, nxt, jobs, strict, [])
        print(f"book (en): {wall:.0f} s wall, {cpu:.0f} s CPU", flush=True)
        if rc == 0:
            swap_in(site / "html", out / "html")
            print(f"book: {out / 'html' / 'index.html'}")
        return rc
    shutil.copytree(ROOT / "locale", src / "locale")   # .mo are made here
    cache = site / ".jupyter_cache"            # numbers of today's code
    new_cache(cache)
    zh_cfg = configs(src, cache, zh_only_pages(src))
    # One reader when it executes into the cache: two parallel readers
    # race in jupyter-cache (one's record is in the database before its
    # notebook file is written; the fresh-clone CI of 2026-12-02 failed
    # with "Notebook file does not exist for cache record PK: 5").
    # Measured (quiet, 2 cores): 98 s serial against 62 s with 2 jobs.
    mode = yaml.safe_load((src / "_config.yml").read_text())["execute"][
        "execute_notebooks"]
    rc, wall, cpu = sphinx(src, nxt, 1 if mode == "cache" else jobs,
                           strict, [])
    print(f"book (en): {wall:.0f} s wall, {cpu:.0f} s CPU", flush=True)
    if rc:
        return rc
    failed = not_cached(cache)
    if failed:    # the Chinese build would execute them again, for nothing
        print("book (zh): not built: the English build did not execute "
              + ", ".join(failed) + " (see its warnings)", flush=True)
        return 1
    zh_out = nxt / "zh"
    # Serial: nothing to execute, and Sphinx's parallel read and write
    # pickle every doctree (outputs included) between processes: measured
    # (2026-12-02, quiet, 2 cores) 32.5 s wall / 32.5 CPU-s serial against
    # 115 s / 134 CPU-s with 2 jobs.
    rc, wall, cpu = sphinx(src, zh_out, 1, strict,
                           ["--config", str(zh_cfg),
                            "--toc", str(src / "_toc_zh.yml")])
    print(f"book (zh): {wall:.0f} s wall, {cpu:.0f} s CPU", flush=True)
    if rc:
        return rc
    os.rename(zh_out / "_build" / "html", site / "html" / "zh")
    swap_in(site / "html", out / "html")
    print(f"book: {out / 'html' / 'index.html'}, "
          f"{out / 'html' / 'zh' / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit("book_zh: a library; the command is python scripts/"
             "build_book.py (--pages for a quick look at a few pages)")
