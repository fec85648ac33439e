"""labkit.predict.choosing.framework_cost: the planner prices a layout
with the framework's own terms and the runtime floor, the same terms
``labkit memory --framework`` prints, and says when only the ledger
fits."""
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.predict.choosing import (Assumptions, Cluster, plan,
                                     standard_model)
from labkit.predict.memory.floor import floor
from labkit.predict.memory.frameworks import record_sizes, terms

ROOT = Path(__file__).resolve().parents[1]
GB = 1e9


def _one(framework, zero=3, gpus=8, params=13e9, **kw):
    m = standard_model(params)
    a = Assumptions(framework=framework)
    lays = plan(m, 16, Cluster(gpus, 8, "h100-80gb"), a, ("full",),
                zero=(zero,), sequence_parallel=(False,), tp=1, pp=1,
                micro_batch=1, **kw)
    return m, lays[0]


@pytest.mark.parametrize("framework", ["fsdp2", "deepspeed"])
def test_the_layout_carries_the_frameworks_terms_and_the_floor(framework):
    m, lay = _one(framework)
    _, plain = _one("ledger")
    mem = lay.memory
    for k in ("params", "grads", "optimizer", "activations", "logits"):
        assert mem[k] == plain.memory[k]
    assert mem["zero3_gather"] == mem["reserve"] == 0.0
    want = terms(framework, ledger_strategy="zero3", params=m.params,
                 gpus=8, **record_sizes(m.arch))
    assert mem["framework"] == pytest.approx(
        sum(t.gpu for t in want if not t.bound))
    before = mem["total"] - mem["floor"]
    assert mem["floor"] == pytest.approx(
        floor(8, allocated=before)["total"])
    assert lay.ledger_total == plain.memory["total"]


def test_a_layout_that_fits_only_the_ledger_says_so():
    # 70B on 16 H100s as DDP over 4 pipeline stages of 4-way TP: the
    # planner's ledger (2 GB reserve) fits, Megatron's fp32 main_grad and
    # the floor do not
    m = standard_model(70e9)
    a = Assumptions(framework="megatron")
    lays = plan(m, 64, Cluster(16, 8, "h100-80gb"), a, ("full",),
                zero=(0,), sequence_parallel=(True,), tp=8, pp=2,
                micro_batch=1)
    lay = lays[0]
    assert not lay.feasible and lay.ledger_total <= 80 * GB
    assert "the ledger with --reserve-gb fits" in lay.reason
    assert "megatron's terms and the floor" in lay.reason


def test_a_layout_the_framework_does_not_run_is_refused_with_its_reason():
    _, lay = _one("megatron", zero=2)
    assert not lay.feasible and "megatron" in lay.reason


def test_cli_shows_headroom_and_refuses_moe_in_one_line():
    run = [sys.executable, "-m", "labkit", "plan", "--params", "13e9",
           "--gpus", "8", "--gpu", "h100-80gb", "--batch", "16", "--tp",
           "1", "--pp", "1", "--top", "2"]
    r = subprocess.run(run + ["--framework", "fsdp2"], capture_output=True,
                       text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "headroom" in r.stdout and "fsdp2's terms" in r.stdout
    moe = ROOT / "tests" / "data" / "hf_configs_moe" / "mixtral-8x7b.json"
    r = subprocess.run([sys.executable, "-m", "labkit", "plan",
                        "--hf-config", str(moe), "--gpus", "8", "--batch",
                        "8", "--framework", "deepspeed"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
