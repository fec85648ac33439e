"""scripts/slurm/run_lab.sbatch from a fresh clone, under a fake Slurm
(sbatch, srun, scontrol on PATH; a fake python in place of torchrun): the
log is written, a quoted argument arrives whole, srun gets the CPUs."""
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Like Slurm: the job's output goes to --output, whose folder must exist
# (Slurm does not create it: no folder, no log).
SBATCH = r"""#!/bin/bash
script=$1; shift
opt() { sed -n "/^#SBATCH --$1=/{s///p;q;}" "$script"; }
export SLURM_JOB_ID=4242 SLURM_JOB_NAME=$(opt job-name)
export SLURM_JOB_NODELIST='node[1-2]' SLURM_NNODES=$(opt nodes)
export SLURM_CPUS_PER_TASK=$(opt cpus-per-task) SLURM_SUBMIT_DIR=$PWD
out=$(opt output); out=${out//%x/$SLURM_JOB_NAME}; out=${out//%j/$SLURM_JOB_ID}
[ -d "$(dirname "$out")" ] || exit 0
echo "Submitted batch job $SLURM_JOB_ID"
bash "$script" "$@" > "$out" 2>&1
"""
SCONTROL = """#!/bin/bash
[ "$1 $2" = "show hostnames" ] && printf 'node1\\nnode2\\n'
"""
# one node's step: record srun's view, then run its command as node1
SRUN = """#!/bin/bash
echo "$SRUN_CPUS_PER_TASK" > "$FAKE_LOGS/srun-cpus"
while [[ $1 == --* ]]; do shift; done
SLURMD_NODENAME=node1 "$@"
"""
PYTHON = """#!{python}
import json, os, sys
with open(os.path.join(os.environ["FAKE_LOGS"], "python-argv"), "w") as f:
    json.dump(sys.argv[1:], f)
"""


def _fresh_clone(dest: Path) -> None:
    """The files a clone of this checkout has under scripts/slurm."""
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard",
         "scripts/slurm"], cwd=ROOT, capture_output=True, text=True,
        check=True).stdout.split()
    for f in files:
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, dest / f)


def test_sbatch_on_a_fresh_clone(tmp_path):
    clone, fake, logs = tmp_path / "clone", tmp_path / "bin", tmp_path / "l"
    for d in (clone, fake, logs):
        d.mkdir()
    _fresh_clone(clone)
    assert not (clone / "_build").exists()
    for name, text in (("sbatch", SBATCH), ("scontrol", SCONTROL),
                       ("srun", SRUN),
                       ("python", PYTHON.format(python=sys.executable))):
        (fake / name).write_text(text)
        (fake / name).chmod(stat.S_IRWXU)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}",
               FAKE_LOGS=str(logs), LABKIT_PYTHON=str(fake / "python"))
    args = ["labkit.runs.tools.selftest", "--mode", "ok", "--note",
            "two  spaces and 'quotes' $HOME", "--empty", ""]
    r = subprocess.run(["sbatch", "scripts/slurm/run_lab.sbatch", *args],
                       cwd=clone, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    log = clone / "scripts" / "slurm" / "logs" / "labkit-4242.out"
    assert log.exists(), "no log: its folder is missing in a fresh clone"
    assert "rank records:" in log.read_text(), log.read_text()
    argv = json.loads((logs / "python-argv").read_text())
    assert argv[argv.index("-m", 2) + 1:] == args     # intact
    assert "--rdzv-endpoint=node1:29500" in argv and "--nnodes=2" in argv
    assert f"--log-dir={clone}/_build/slurm/4242/logs/node1" in argv
    assert (logs / "srun-cpus").read_text().strip() == "32"
