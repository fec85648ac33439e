"""labkit.predict.plan_moe (labkit plan --hf-config): DeepSeek-V3's
published layout is feasible, the per-GPU states follow the ledger, and
Mixtral's EP8 and TP8 rows stand side by side."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from labkit import arch as A
from labkit.predict import plan_moe as M
from labkit.predict.params_moe import moe_counts

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "tests" / "data" / "hf_configs_moe"


def _cli(*argv):
    return subprocess.run([sys.executable, "-m", "labkit", "plan", *argv],
                          capture_output=True, text=True, cwd=ROOT)


def test_deepseek_v3_published_layout_fits():
    r = _cli("--hf-config", str(CONFIGS / "deepseek-v3.json"), "--gpus",
             "2048", "--gpu", "h800-80gb", "--batch", "15360", "--seq",
             "4096", "--pp", "16", "--ep", "64", "--tp", "1", "--json")
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
