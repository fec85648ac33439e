"""labkit.predict.choosing.plan_moe (labkit plan --hf-config): DeepSeek-V3's
published layout is feasible, the per-GPU states follow the ledger, and
Mixtral's EP8 and TP8 rows stand side by side."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from labkit import arch as A
from labkit.predict.choosing import plan_moe as M
from labkit.predict.model.params_moe import moe_counts

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "tests" / "data" / "hf_configs_moe"


def _cli(*argv):
    return subprocess.run([sys.executable, "-m", "labkit", "plan", *argv],
                          capture_output=True, text=True, cwd=ROOT)


def test_deepseek_v3_published_layout_fits():
    r = _cli("--hf-config", str(CONFIGS / "deepseek-v3.json"), "--gpus",
             "2048", "--gpu", "h800-80gb", "--batch", "15360", "--seq",
             "4096", "--pp", "16", "--ep", "64", "--tp", "1", "--cp", "1",
             "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    (lay,) = out["layouts"]
    assert (lay["tp"], lay["pp"], lay["dp"], lay["ep"]) == (1, 16, 128, 64)
    assert lay["fits"] and lay["experts_per_gpu"] == 4
    assert lay["a2a_link"] == "infiniband"      # EP64 spans 8 nodes
    assert 10 < lay["total_gb"] < 80


def test_states_are_the_ledger():
    a = A.from_hf_config(CONFIGS / "deepseek-v3.json")
    spec = M.gpu_spec("h800-80gb")
    x = M.layout(a, 1, 16, 128, 64, 4096, 1, 8, spec, 15360)
    w = M.parts(a)
    dense = 4 * w["layer"] + a.vocab * a.hidden    # ceil(61/16) = 4
    experts = 4 * 4 * moe_counts(a)["expert"]       # 4 layers, 4 experts
    want = dense * (4 + 12 / 128) + experts * (4 + 12 / 2)
    assert x["states_gb"] == pytest.approx(want / 1e9)


def test_mixtral_ep8_and_tp8_side_by_side():
    a = A.from_hf_config(CONFIGS / "mixtral-8x7b.json")
    lays = M.plan(a, 8, 8, "h100-80gb", 64, 4096)
    ep8 = next(x for x in lays if (x["tp"], x["pp"], x["ep"]) == (1, 1, 8))
    tp8 = next(x for x in lays if (x["tp"], x["pp"], x["ep"]) == (8, 1, 1))
    assert ep8["a2a_link"] == "nvlink" and tp8["a2a_gb_per_step"] == 0
    assert ep8["experts_per_gpu"] == 1 and tp8["experts_per_gpu"] == 8
    # 46.7B with fp32 Adam is 747 GB of states: no 8 x 80 GB layout fits
    assert not any(x["fits"] for x in lays)


def test_dense_config_goes_to_the_dense_planner(tmp_path):
    dense = str(ROOT / "tests" / "data" / "hf_configs" / "llama3-8b.json")
    r = _cli("--hf-config", dense, "--gpus", "8", "--gpu", "h100-80gb",
             "--batch", "8", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["model"]["arch"]["kv_heads"] == 8
    ep = _cli("--hf-config", dense, "--gpus", "8", "--batch", "8", "--ep",
              "2")
    assert ep.returncode == 2 and "mixture of experts" in ep.stderr
    assert len(ep.stderr.strip().splitlines()) == 1
    with pytest.raises(ValueError, match="no experts"):
        M.plan(A.preset("llama3-8b"), 8, 8, "h100-80gb", 8, 4096)


def test_cp_is_searched_and_ep_folds_over_dp_cp():
    a = A.from_hf_config(CONFIGS / "mixtral-8x7b.json")
    lays = M.plan(a, 64, 8, "h100-80gb", 16, 131072, pp=4, tp=1)
    assert {x["cp"] for x in lays} >= {1, 2, 4}
    for x in lays:
        assert x["tp"] * x["cp"] * x["pp"] * x["dp"] == 64
        assert (x["dp"] * x["cp"]) % x["ep"] == 0
        assert (x["ring_gb_per_step"] > 0) == (x["cp"] > 1)
    assert any(x["fits"] and x["cp"] > 1 for x in lays)


def test_cp_terms():
    """Same replicas (dp x cp): the same states; activations, dispatch
    and all-to-all per rank shrink by cp; ring attention's K/V blocks
    (context_parallel.ring) added, on NVLink inside a node."""
    from labkit.predict import context_parallel as CP
    a = A.from_hf_config(CONFIGS / "mixtral-8x7b.json")
    spec = M.gpu_spec("h100-80gb")
    one = M.layout(a, 1, 4, 16, 8, 32768, 1, 8, spec, 64)
    two = M.layout(a, 1, 4, 8, 8, 32768, 1, 8, spec, 64, cp=2)
    assert two["states_gb"] == pytest.approx(one["states_gb"])
    kv = 2 * 2 * (32768 // 2) * a.kv_dim * 2 / 1e9     # two K/V blocks
    assert two["activations_gb"] == pytest.approx(
        one["activations_gb"] / 2 + kv)
    assert two["dispatch_gb"] == pytest.approx(one["dispatch_gb"] / 2)
    # half the tokens per rank, twice the micro-batches per rank (dp / 2)
    assert two["a2a_gb_per_step"] == pytest.approx(one["a2a_gb_per_step"])
    ring = CP.ring(a, 1, 32768, 2)["send"]["bytes"] * 8 * 8  # layers, mb
    assert two["ring_gb_per_step"] == pytest.approx(ring / 1e9)
    assert two["ring_link"] == "nvlink"
    assert M.layout(a, 1, 1, 1, 8, 32768, 1, 8, spec, 64, cp=64)[
        "ring_link"] == "infiniband"


def test_roofline_prices_thinly_routed_experts_by_their_intensity():
    """--roofline: at EP1 each of DeepSeek-V3's 256 experts gets 128 of a
    micro-batch's 4,096 x 8 routed tokens: memory-bound on the H800, so
    slower than the flat efficiency says; at EP64 (8,192 tokens each)
    the roofline and the flat efficiency agree."""
    a = A.from_hf_config(CONFIGS / "deepseek-v3.json")
    spec = M.gpu_spec("h800-80gb")
    args = (a, 1, 16, 128)
    ep1, ep1_roof, ep64, ep64_roof = (
        M.layout(*args, ep, 4096, 1, 8, spec, 15360,
                 roofline=r)["compute_s"]
        for ep in (1, 64) for r in (False, True))
    assert ep1_roof > 1.01 * ep1
    assert ep64_roof == pytest.approx(ep64, rel=1e-9)
