"""The layers of labkit as contracts that fail (``.importlinter``; the
picture is docs/architecture.md): predict is pure and below measure, which
is below runs; nothing imports runs; no import circle in labkit or in
scripts; scripts use labkit, never the reverse. Each contract is shown to
fail on an upward import added to a copy of the package."""
import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / ".importlinter"
LINT = ("import sys\nfrom importlinter.cli import lint_imports\n"
        "sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True,"
        " no_logo=True))\n")


def lint(root: Path) -> subprocess.CompletedProcess:
    """import-linter over the labkit found under ``root``, in its own
    process (grimp imports nothing; it reads the files)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, "-c", LINT, str(CONFIG)],
                          cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)


def cycles(graph: nx.DiGraph) -> list[list[str]]:
    return [sorted(c) for c in nx.strongly_connected_components(graph)
            if len(c) > 1]


GRAPH = ("import json, sys\nimport grimp\n"
         "g = grimp.build_graph('labkit', include_external_packages=True,"
         " cache_dir=None)\n"
         "json.dump([[m, t] for m in sorted(g.modules) for t in "
         "sorted(g.find_modules_directly_imported_by(m))], sys.stdout)\n")


def labkit_graph(root: Path = ROOT) -> nx.DiGraph:
    """labkit's imports as grimp reads them from the files under ``root``
    (its own process: the labkit found there, not the one imported here)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    r = subprocess.run([sys.executable, "-c", GRAPH], cwd=root, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    g = nx.DiGraph()
    g.add_edges_from(json.loads(r.stdout))
    return g


def scripts_graph() -> nx.DiGraph:
    """scripts/ is a folder of programs, not a package: its imports of one
    another (``import zh_pieces``, ``from scripts.grading import x``,
    ``from grading import x``), read from the files."""
    mods = {}
    for p in (ROOT / "scripts").rglob("*.py"):
        rel = p.relative_to(ROOT / "scripts").with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        mods[name] = p
    g = nx.DiGraph()
    for name, p in mods.items():
        g.add_node(name)
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.Import):
                targets = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom) and not n.level:
                targets = [n.module or ""] + [f"{n.module}.{a.name}"
                                              for a in n.names]
            else:
                continue
            for t in targets:
                t = t.removeprefix("scripts.")
                if t in mods and t != name:
                    g.add_edge(name, t)
    return g


def test_contracts_hold():
    r = lint(ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def test_no_import_cycles_in_labkit():
    assert cycles(labkit_graph()) == []


def test_no_import_cycles_in_scripts():
    assert cycles(scripts_graph()) == []


def test_labkit_never_imports_scripts():
    g = labkit_graph()
    assert [(a, b) for a, b in g.edges
            if b == "scripts" or b.startswith("scripts.")] == []


# the build-it parts: one file per part a student writes, and its harness
LARGE = {"labkit/buildit": 21}


def test_folders_stay_small():
    """No folder of labkit holds more than 16 modules side by side
    (``__init__`` and ``__main__`` not counted)."""
    sizes = {}
    for d in [ROOT / "labkit", *(ROOT / "labkit").rglob("*")]:
        if d.is_dir() and d.name != "__pycache__":
            sizes[d.relative_to(ROOT).as_posix()] = len(
                [f for f in d.glob("*.py")
                 if f.name not in ("__init__.py", "__main__.py")])
    assert {d: n for d, n in sizes.items()
            if n > LARGE.get(d, 16)} == {}


# attributes of a package __init__ that a submodule's name shadows
# a lab's check module named after its one function (labs 13, 14, 16, 17)
SHADOWED = {"labkit.buildit.smoke", "labkit.checks.experts",
            "labkit.checks.precision", "labkit.checks.roofline",
            "labkit.checks.hangs", "labkit.checks.optimizers"}


def test_no_submodule_shares_a_name_with_its_package_attribute():
    """``from labkit.predict.sharding import traffic`` must give the
    module: no ``__init__`` defines or imports a name its submodule has."""
    found = set()
    for init in (ROOT / "labkit").rglob("__init__.py"):
        pkg = ".".join(init.parent.relative_to(ROOT).parts)
        subs = {p.stem for p in init.parent.glob("*.py")} | {
            p.name for p in init.parent.iterdir()
            if (p / "__init__.py").exists()}
        names = set()
        for n in ast.parse(init.read_text()).body:
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
                names.add(n.name)
            elif isinstance(n, ast.Assign):
                names |= {t.id for t in n.targets
                          if isinstance(t, ast.Name)}
            elif isinstance(n, ast.ImportFrom) and n.module != pkg:
                names |= {a.asname or a.name for a in n.names}
        found |= {f"{pkg}.{s}" for s in subs & names}
    assert found == SHADOWED


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "labkit", tmp_path / "labkit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


@pytest.mark.parametrize("where, line, contract", [
    ("predict/gpus.py", "import torch", "imports no torch"),
    ("predict/gpus.py", "from labkit.measure import memory",
     "imports no torch"),
    ("measure/memory.py", "from labkit.runs import zero", "runs above"),
    ("nn/mlp.py", "from labkit.runs.tp import layers", "imports labkit.runs"),
])
def test_an_upward_import_breaks_a_contract(tmp_path, where, line,
                                            contract):
    root = _copy(tmp_path)
    f = root / "labkit" / where
    f.write_text(f.read_text() + f"\n{line}  # upward, on purpose\n")
    r = lint(root)
    assert r.returncode == 1, r.stdout[-2000:]
    broken = [s for s in r.stdout.splitlines() if " BROKEN" in s]
    assert any(contract in s for s in broken), r.stdout[-2000:]


def test_a_circle_is_found(tmp_path):
    root = _copy(tmp_path)
    f = root / "labkit" / "predict" / "model" / "record.py"
    f.write_text(f.read_text() +
                 "\nfrom labkit.predict.model import arch  # a circle\n")
    found = cycles(labkit_graph(root))
    assert any({"labkit.predict.model.arch",
                "labkit.predict.model.record"} <= set(c) for c in found)


DOC = ROOT / "docs" / "architecture.md"


def _block(marker: str) -> list[str]:
    text = DOC.read_text()
    start = text.index(f"<!-- {marker}: checked by tests/test_layers.py -->")
    lines = text[start:].splitlines()[1:]
    out = []
    for line in lines[1 if lines[0].startswith("```") else 0:]:
        if line.startswith("```") or (out and not line.strip()):
            break
        out.append(line)
    return out


def test_architecture_picture_lists_every_folder():
    drawn = {line.split()[0].rstrip("/") for line in _block("folders")}
    real = {"scripts", "labkit"} | {
        d.parent.relative_to(ROOT).as_posix()
        for d in (ROOT / "labkit").rglob("__init__.py")}
    assert drawn == real


def test_architecture_table_names_what_exists():
    rows = [r for r in _block("chapters") if r.startswith("| ")][1:]
    assert len(rows) == len(list((ROOT / "book").glob("[0-9][0-9]_*.md")))
    for row in rows:
        chapter, lab, *mods = [c.strip() for c in row.strip("|").split("|")]
        assert (ROOT / "book" / f"{chapter}.md").exists(), chapter
        assert lab == "-" or (ROOT / "labs" / f"{lab}.ipynb").exists(), lab
        for name in re.findall(r"`(labkit[\w.]*)`", " ".join(mods)):
            path = ROOT / name.replace(".", "/")
            assert path.with_suffix(".py").exists() or (
                path / "__init__.py").exists(), name
