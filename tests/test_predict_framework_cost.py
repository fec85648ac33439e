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


def test_cli_shows_headroom():
    run = [sys.executable, "-m", "labkit", "plan", "--params", "13e9",
           "--gpus", "8", "--gpu", "h100-80gb", "--batch", "16", "--tp",
           "1", "--pp", "1", "--top", "2"]
    r = subprocess.run(run + ["--framework", "fsdp2"], capture_output=True,
                       text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "headroom" in r.stdout and "fsdp2's terms" in r.stdout


# -- a mixture of experts: plan_moe's layouts under a framework ------------

MOE = ROOT / "tests" / "data" / "hf_configs_moe"


def _moe(framework, tp=2, pp=2, dp=4, ep=4, gpus=16):
    from labkit.predict.choosing import plan_moe as M
    from labkit.predict.model import arch
    a = arch.from_hf_config(MOE / "qwen3-30b-a3b.json")
    spec = M.gpu_spec("h100-80gb")
    lay = M.layout(a, tp, pp, dp, ep, 4096, 1, 8, spec, 64,
                   framework=framework)
    w = M.parts(a)
    layers = -(-a.layers // pp)
    dense = (layers * w["layer"] + w["ends"]) / tp
    experts = min(layers, a.moe_layers) * (a.experts // ep) * w["expert"] \
        / tp
    return a, lay, dense, experts


def _sum(lay, *names):
    return sum(t["gpu"] for t in lay["terms"] if t["name"] in names)


def test_moe_terms_per_framework():
    """Qwen3-30B-A3B as TP2 x PP2 x DP4 with EP4 (the experts' optimizer
    states and fp32 gradients over an expert-data-parallel group of 1):
    each framework's terms, and the floor's all-to-all buffers for the
    3 other EP ranks."""
    from labkit.predict.choosing.framework_cost import moe_terms
    _, meg, dense, experts = _moe("megatron")
    assert _sum(meg, "main_grad in fp32, non-expert") == 2 * dense
    assert _sum(meg, "main_grad in fp32, experts") == 2 * experts
    _, ds, _, _ = _moe("deepspeed")
    assert _sum(ds, "fp32 grads, non-expert (over DP x CP)") == \
        pytest.approx(4 * dense / 4)
    assert _sum(ds, "fp32 grads, experts (over the expert-DP group)") == \
        pytest.approx(4 * experts / 1)
    assert _sum(ds, "reduce bucket") == 500_000_000 * 2
    _, fs, _, _ = _moe("fsdp2")
    unit = _sum(fs, "prefetched unit") / 2
    assert _sum(fs, "unit gradient, fp32 reduce_dtype") == 4 * unit
    # the largest unit on the GPU: here the embedding's half (TP2), above
    # one layer's 32 local experts and one layer's own weights
    from labkit.predict.choosing.plan_moe import parts
    w = parts(_moe("ledger")[0])
    assert unit == w["ends"] / 2 > max(experts / 24, w["layer"] / 2)
    for lay in (meg, ds, fs):
        assert _sum(lay, "nccl all-to-all buffers") == 2 * 4 * 2 ** 20 * 2 * 3
        assert all(t["source"] for t in lay["terms"])
        assert lay["need_gb"] == pytest.approx(
            lay["total_gb"] + lay["framework_gb"] + lay["floor_gb"])
        assert lay["headroom_gb"] == pytest.approx(80 - lay["need_gb"])
    with pytest.raises(ValueError, match="--framework"):
        moe_terms("jax", dense=1, experts=1, unit=1, reps=1, ep=1)


def test_fsdp_shards_the_experts_weights_and_gradients_too():
    """FSDP runs a MoE layout fully sharded (ZeRO-3) without a pipeline,
    and keeps a stage's weights whole with one (torchtitan's default,
    ZeRO-2): 16 or 2 + 14 bytes per parameter over DP x CP, the experts'
    over the expert-data-parallel ranks."""
    _, z3, dense, experts = _moe("fsdp2", tp=1, pp=1, dp=8, ep=2)
    assert z3["zero"] == 3 and z3["name"].endswith("FSDP (ZeRO-3)")
    assert z3["states_gb"] * GB == pytest.approx(
        16 * (dense / 8 + experts / 4))
    assert _sum(z3, "unsharded unit") == _sum(z3, "prefetched unit") > 0
    _, z2, dense, experts = _moe("fsdp2", tp=1, pp=2, dp=4, ep=2)
    assert z2["zero"] == 2 and _sum(z2, "unsharded unit") == 0
    assert z2["states_gb"] * GB == pytest.approx(
        2 * (dense + experts) + 14 * (dense / 4 + experts / 2))
    _, meg, _, _ = _moe("megatron", tp=1, pp=1, dp=8, ep=2)
    assert meg["zero"] == 1 and meg["name"].endswith("ZeRO-1")


def test_a_moe_layout_that_fits_only_the_ledger_says_so():
    """Qwen3-30B-A3B on 8 H100s as TP2 x PP2 x DP2 without EP: the
    ledger with its 2 GB reserve fits (79.4 GB), Megatron's fp32
    main_grad and the floor do not; TP2 x PP4 fits with headroom."""
    _, lay, _, _ = _moe("megatron", tp=2, pp=2, dp=2, ep=1, gpus=8)
    _, led, _, _ = _moe("ledger", tp=2, pp=2, dp=2, ep=1, gpus=8)
    assert led["fits"] and not lay["fits"]
    assert lay["reason"].startswith("does not fit:")
    assert "the ledger with --reserve-gb fits" in lay["reason"]
    assert "megatron's terms and the floor" in lay["reason"]
    _, ok, _, _ = _moe("megatron", tp=2, pp=4, dp=1, ep=1, gpus=8)
    assert ok["fits"] and ok["reason"] == ""
    assert ok["verdict"].startswith("fits with") and \
        "GB headroom per GPU" in ok["verdict"]


def test_cli_prices_moe_with_the_framework():
    r = subprocess.run([sys.executable, "-m", "labkit", "plan",
                        "--hf-config", str(MOE / "qwen3-30b-a3b.json"),
                        "--gpus", "8", "--gpu", "h100-80gb", "--batch", "64",
                        "--framework", "megatron", "--top", "2", "--all"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "headroom" in r.stdout and "megatron's terms" in r.stdout
    assert "ZeRO-1: fits with" in r.stdout
    assert "GB headroom per GPU" in r.stdout
    assert "not megatron's terms and the floor" in r.stdout
