"""The first code cell of every lab: install the course outside its checkout.

A lab opened from the published book in Colab runs without the repository:
its first code cell (before the ``parameters`` cell) installs the course when
``labkit`` is not importable, quietly with one progress line, and is a no-op
everywhere else (the checkout, Binder, papermill, nbval). That cell must run
before labkit exists, so it cannot import this module: it is *generated* here,
from ``_config.yml``'s ``repository:`` (url and branch; the one place the
address is written), and a test checks every lab carries the current one.

    python -m labkit.bootstrap --check    # exit 1 if a lab's cell is stale
    python -m labkit.bootstrap --write    # rewrite the first cell of each lab

``LABKIT_SOURCE`` overrides what the cell installs (a path or a pip
requirement), e.g. to install from a local checkout.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TAG = "bootstrap"
# remove-input: the book's HTML page shows the lesson, not this plumbing;
# the cell still runs wherever the notebook runs (Colab included).
TAGS = (TAG, "remove-input")
PROGRESS = "installing the course (pinned), once ..."


def requirement(config: Path = ROOT / "_config.yml") -> str:
    """``labkit @ git+URL@BRANCH`` from _config.yml ("" without a URL)."""
    text = config.read_text()
    url = re.search(r'^  url: "?([^"\s]*)"?', text, re.M)
    branch = re.search(r'^  branch: "?([^"\s#]*)"?', text, re.M)
    if not url or not url.group(1):
        return ""
    ref = f"@{branch.group(1)}" if branch and branch.group(1) else ""
    return f"labkit @ git+{url.group(1)}{ref}"


def cell_source(req: str) -> str:
    """The cell: plain Python, importing nothing of labkit."""
    return (
        "# Outside the course's checkout (e.g. Colab) this installs it first;\n"
        "# everywhere else it does nothing.\n"
        "import importlib.util, os, subprocess, sys\n"
        f'course = os.environ.get("LABKIT_SOURCE", {json.dumps(req)})\n'
        'if importlib.util.find_spec("labkit") is None:\n'
        f"    print({json.dumps(PROGRESS)}, flush=True)\n"
        '    subprocess.run([sys.executable, "-m", "pip", "install", "-q",\n'
        '                    course or sys.exit(\n'
        '        "this copy names no repository: set LABKIT_SOURCE to "\n'
        '        "git+https://github.com/OWNER/REPO")], check=True)')


def labs() -> list[Path]:
    return sorted((ROOT / "labs").glob("[0-9]*_*.ipynb"))


def _first_code(nb: dict) -> int:
    return next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code")


def write(path: Path, source: str) -> bool:
    """Put the cell first (before ``parameters``); True if the file changed."""
    raw = path.read_text()
    nb = json.loads(raw)
    i = _first_code(nb)
    cell = {"cell_type": "code", "execution_count": None, "id": TAG,
            "metadata": {"tags": list(TAGS)}, "outputs": [],
            "source": source.splitlines(keepends=True)}
    tags = nb["cells"][i].get("metadata", {}).get("tags", [])
    if TAG in tags:
        nb["cells"][i] = {**nb["cells"][i], "source": cell["source"],
                          "metadata": {**nb["cells"][i]["metadata"],
                                       "tags": tags + [t for t in TAGS
                                                       if t not in tags]}}
    else:
        nb["cells"].insert(i, cell)
    new = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    if new != raw:
        path.write_text(new)
    return new != raw


def stale(source: str) -> list[str]:
    out = []
    for path in labs():
        nb = json.loads(path.read_text())
        c = nb["cells"][_first_code(nb)]
        if not set(TAGS) <= set(c["metadata"].get("tags", [])) or \
                "".join(c["source"]) != source:
            out.append(path.name)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", action="store_true")
    g.add_argument("--write", action="store_true")
    a = ap.parse_args(argv)
    source = cell_source(requirement())
    if a.write:
        for path in labs():
            if write(path, source):
                print(f"updated {path.relative_to(ROOT)}")
        return 0
    bad = stale(source)
    if bad:
        print(f"stale first cell in {', '.join(bad)}: run "
              "python -m labkit.bootstrap --write", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
