"""labkit.predict.pipeline_parallel.stage_bytes_moe (the ``stages`` of ``labkit plan
--json`` for a mixture of experts): every stage's parameters per GPU are
the record's own tensors of its layers and ends, its bytes follow the
planner's terms, and the stages add up to the published total."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from labkit import arch as A
from labkit.predict.model import params as P
from labkit.predict.choosing import plan_moe as M
from labkit.predict.pipeline_parallel import stage_bytes_moe as SM
from labkit.predict.model.params_moe import moe_counts

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "tests" / "data" / "hf_configs_moe"


def _by_stage(a, parts, ep):
    """One GPU's parameters per stage, counted from ``params.tensors``
    (the names say the layer; ``embed_tokens`` is the first stage's,
    ``norm`` and ``lm_head`` the last's, a tied head a copy of the
    embedding there)."""
    starts = [sum(parts[:i]) for i in range(len(parts))]
    out = [0] * len(parts)
    for name, shape, _ in P.tensors(a):
        n = P.numel(shape)
        m = re.match(r"layers\.(\d+)\.", name)
        if m:
            i = max(k for k, s in enumerate(starts) if s <= int(m[1]))
            out[i] += n // ep if ".mlp.experts." in name else n
        elif name.startswith("embed_"):
            out[0] += n
        else:                                 # norm, lm_head
            out[-1] += n
    if a.tied and len(parts) > 1:
        out[-1] += a.vocab * a.hidden         # Megatron-LM's copy
    return out


def test_deepseek_v3_published_layout_stages_are_the_record():
    r = subprocess.run(
        [sys.executable, "-m", "labkit", "plan", "--hf-config",
         str(CONFIGS / "deepseek-v3.json"), "--gpus", "2048", "--gpu",
         "h800-80gb", "--batch", "15360", "--seq", "4096", "--pp", "16",
         "--ep", "64", "--tp", "1", "--cp", "1", "--json"],
        capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    (lay,) = out["layouts"]
    st = lay["stages"]
    a = A.from_hf_config(CONFIGS / "deepseek-v3.json")
    parts = tuple(s["layers"] for s in st)
    # 61 layers on 16 stages: 4 each, one fewer on the ends inward
    assert parts == (3, 3) + (4,) * 13 + (3,)
    assert [s["param_count"] for s in st] == _by_stage(a, parts, 64)
    # the stages hold the record once, the routed experts 64 times over
    assert sum(s["dense"] + 64 * s["experts"] for s in st) == out["total"]
    assert out["total"] == P.count(a)["total"]
    # the three dense layers first: no experts, no dispatch on stage 0
    assert st[0]["moe_layers"] == 0 and st[0]["dispatch"] == 0
    assert st[1]["experts"] == 3 * 4 * moe_counts(a)["expert"]
    for s in st:
        assert s["params"] == s["grads"] == 2 * s["param_count"]
        assert s["optimizer"] == pytest.approx(
            12 * (s["dense"] / 128 + s["experts"] / 2))
        # 1F1B: min(16 - i, 120 micro-batches) in flight, 2 s b h each
        assert s["activations"] == (16 - s["stage"]) * s["layers"] * 2 \
            * 4096 * a.hidden
        assert s["total"] == pytest.approx(sum(
            s[k] for k in ("params", "grads", "optimizer", "activations",
                           "dispatch")))
    # the layout's own number is the planner's bound on its heaviest stage
    assert max(s["total"] for s in st) <= lay["total_gb"] * 1e9


@pytest.mark.parametrize("name", ["mixtral-8x7b", "qwen3-30b-a3b",
                                  "qwen1.5-moe-a2.7b", "qwen3-moe-tiny",
                                  "deepseek-tiny-no-q-lora"])
@pytest.mark.parametrize("pp,ep", [(1, 1), (2, 2), (2, 4)])
def test_stages_are_the_tensors_of_their_layers(name, pp, ep):
    a = A.from_hf_config(CONFIGS / f"{name}.json")
    if pp > a.layers or a.experts % ep:
        pytest.skip("layout does not divide this model")
    spec = M.gpu_spec("h100-80gb")
    lay = M.layout(a, 1, pp, 4, ep, 128, 1, 8, spec, 16)
    st = SM.stage_report(a, lay, 128, 1, 16)
    parts = tuple(s["layers"] for s in st)
    assert sum(parts) == a.layers
    assert [s["param_count"] for s in st] == _by_stage(a, parts, ep)
    extra = a.vocab * a.hidden if a.tied and pp > 1 else 0
    assert sum(s["dense"] + ep * s["experts"] for s in st) == \
        P.count(a)["total"] + extra
    if pp == ep == 1:               # one GPU of DP: the whole model
        assert st[0]["param_count"] == P.count(a)["total"]


def test_tensor_parallel_divides_every_weight_as_the_planner_does():
    a = A.from_hf_config(CONFIGS / "mixtral-8x7b.json")
    lay = M.layout(a, 2, 2, 2, 2, 4096, 1, 8, M.gpu_spec("h100-80gb"), 64)
    one = SM.stage_report(a, {**lay, "tp": 1}, 4096, 1, 64)
    two = SM.stage_report(a, lay, 4096, 1, 64)
    for x, y in zip(one, two):
        assert y["param_count"] == pytest.approx(x["param_count"] / 2)


@pytest.mark.parametrize("pp,zero", [(1, 3), (2, 2)])
def test_fsdp_stages_shard_weights_and_gradients(pp, zero):
    """Under --framework fsdp2 a stage's weights (ZeRO-3, no pipeline)
    and gradients (ZeRO-2 and 3) shard as its optimizer states do: the
    non-expert part over DP, the experts over the expert-DP ranks."""
    a = A.from_hf_config(CONFIGS / "mixtral-8x7b.json")
    lay = M.layout(a, 1, pp, 4, 2, 4096, 1, 8, M.gpu_spec("h100-80gb"), 64,
                   framework="fsdp2")
    assert lay["zero"] == zero
    for s in SM.stage_report(a, lay, 4096, 1, 64):
        sharded = s["dense"] / 4 + s["experts"] / 2
        assert s["grads"] == pytest.approx(2 * sharded)
        assert s["params"] == pytest.approx(
            2 * (sharded if zero == 3 else s["param_count"]))
        assert s["optimizer"] == pytest.approx(12 * sharded)
