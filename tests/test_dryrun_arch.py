"""``labkit dryrun --hf-config``: a real-size fake-tensor step of the
Llama-style decoder; its model states per rank are the ledger's 16 Psi/N."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CFG = ROOT / "tests" / "data" / "hf_configs" / "llama3-8b.json"


def _dry(*argv):
    return subprocess.run([sys.executable, "-m", "labkit", "dryrun", *argv],
                          capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


def test_llama3_8b_fsdp2_full_on_8_fake_ranks():
    r = _dry("--hf-config", str(CFG), "--seq", "4096", "--gpus", "8",
             "--strategy", "fsdp2_full", "--json")
    assert r.returncode == 0, r.stderr
    row = json.loads(r.stdout)["labs"]["llama3-8b"]["cases"][0]
    psi = 8_030_261_248
    assert abs(row["states"] / (16 * psi / 8) - 1) <= 0.01
    assert row["agrees"] and row["fits"] and row["peak"] > row["states"]


def test_bad_combinations_are_one_line():
    r = _dry("--hf-config", str(CFG), "--gpus", "8")
    assert r.returncode == 2 and "--seq" in r.stderr
    r = _dry("--preset", "llama-tiny", "--seq", "32", "--layers", "2")
    assert r.returncode == 2 and "not two" in r.stderr
    r = _dry("--preset", "llama-tiny", "--seq", "32", "--gpus", "2",
             "--strategy", "fsdp1_full_shard")
    assert r.returncode == 2 and "fsdp2" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
