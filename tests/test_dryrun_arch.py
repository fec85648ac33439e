"""``labkit dryrun --hf-config``: a real-size fake-tensor step of the
Llama-style decoder; its model states per rank are the ledger's 16 Psi/N."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

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


TIED = ROOT / "tests" / "data" / "hf_configs" / "qwen2-0.5b.json"
TINY_TIED = ROOT / "tests" / "data" / "hf_configs" / "tiny-llama-tied.json"


def _states(cfg, strategy, gpus, seq):
    r = _dry("--hf-config", str(cfg), "--seq", str(seq), "--gpus",
             str(gpus), "--strategy", strategy, "--json")
    assert r.returncode == 0, (strategy, r.stderr)
    (row,) = [lab["cases"][0] for lab in json.loads(r.stdout)["labs"]
              .values()]
    assert row["agrees"], strategy
    return row["states"]


def test_tied_embeddings_at_real_size():
    """Qwen2-0.5B ties its head to the token table; FSDP2 puts one
    parameter in one group only, so the root owns both (as torchtitan
    does), and the states per rank are the ledger's 16 Psi / N."""
    psi = 494_032_768  # transformers' Qwen2ForCausalLM, tied
    got = _states(TIED, "fsdp2_full", 4, 256)
    assert abs(got / (16 * psi / 4) - 1) <= 0.01


@pytest.mark.parametrize("strategy,n", [("fsdp2_grad_op", 4),
                                        ("fsdp2_hybrid", 2), ("ddp", 1)])
def test_tied_embeddings_under_every_strategy(strategy, n):
    """Every data-parallel strategy on a tied config: 16 Psi / N, N the
    ranks one copy is sharded over (the hybrid's group of 2)."""
    from labkit.predict.model import arch
    from labkit.predict.model.params import total
    psi = total(arch.from_hf_config(TINY_TIED))
    got = _states(TINY_TIED, strategy, 4, 32)
    assert abs(got / (16 * psi / n) - 1) <= 0.01


FAMILIES = ROOT / "tests" / "data" / "hf_configs_families"


def _in_process(rec, world, seq=16):
    """One fake-tensor step of ``rec`` under fsdp2_full, in this process
    (the command's own case and check, without a Python start)."""
    from labkit.dryrun import cli
    case = cli.arch_case(rec, "fsdp2_full", world, 1, seq, True)
    return cli.run_cases([case], 80e9, {})[0]


@pytest.mark.parametrize("path", sorted(FAMILIES.glob("*.json")),
                         ids=lambda p: p.stem)
def test_every_family_runs_at_16_psi_over_n(path):
    """Every variant the record carries is built and stepped (a tiny model
    of each published family, 2 fake ranks): the model states per rank are
    16 Psi / N, less the gradients of the cross-attention layers, which a
    text-only step skips (as transformers' MllamaTextModel)."""
    from labkit import arch
    from labkit.predict.model.params import text_step_idle, total
    from test_decoder import _tiny
    rec = _tiny(arch.from_hf_config(path))
    row = _in_process(rec, 2)
    psi, idle = total(rec), text_step_idle(rec)
    assert row["agrees"], row["states_ratio"]
    assert abs(row["states"] / ((16 * psi - 4 * idle) / 2) - 1) <= 0.01


def test_gemma2_9b_at_real_size():
    """The published Gemma 2 9B (sandwich norms, GeGLU, soft-caps, local
    layers, head_dim 256, a 256k vocabulary) at seq 32 on 8 fake ranks:
    16 Psi / N per rank."""
    from labkit import arch
    row = _in_process(arch.from_hf_config(FAMILIES / "gemma2-9b.json"), 8,
                      seq=32)
    psi = 9_241_705_984   # transformers' build (test_predict_families)
    assert row["agrees"] and row["states"] == 16 * psi / 8
