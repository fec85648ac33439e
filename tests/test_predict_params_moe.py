"""labkit.predict.model.params_moe (through params): the mixture-of-experts
families held to transformers' own meta build tensor by tensor (fused
experts spelled out), and the published totals."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from labkit import arch as A
from labkit.predict.model import params as P

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "tests" / "data" / "hf_configs_moe"
NAMES = sorted(p.stem for p in CONFIGS.glob("*.json"))


def _cli(*argv):
    return subprocess.run([sys.executable, "-m", "labkit", *argv],
                          capture_output=True, text=True, cwd=ROOT)


def test_mixtral_published_total_and_active():
    r = _cli("params", "--hf-config",
             str(CONFIGS / "mixtral-8x7b.json"), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["total"] == 46_702_792_704
    assert out["active"] == 12_879_925_248


def test_deepseek_v3_is_671b_with_37b_active():
    c = P.count(A.from_hf_config(CONFIGS / "deepseek-v3.json"))
    # Liu et al. 2024 (DeepSeek-V3 report), abstract: 671B total, 37B
    # activated per token; the MTP module is not in the model
    assert round(c["total"] / 1e9) == 671
    assert round(c["active"] / 1e9) == 37 + 1   # 37.55: "37B" truncated
    assert int(c["active"] / 1e9) == 37


def _expand(hf: dict) -> dict:
    """transformers 5's fused experts, one expert at a time."""
    out = {}
    for n, s in hf.items():
        n = n.removeprefix("model.")
        if n.endswith("experts.gate_up_proj"):
            e, two_f, h = s
            for i in range(e):
                for w in ("gate_proj", "up_proj"):
                    out[f"{n[:-12]}{i}.{w}.weight"] = (two_f // 2, h)
        elif n.endswith("experts.down_proj") and len(s) == 3:
            for i in range(s[0]):
                out[f"{n[:-9]}{i}.down_proj.weight"] = tuple(s[1:])
        else:
            out[n] = tuple(s)
    return out


@pytest.mark.parametrize("name", NAMES)
def test_equals_transformers_tensor_by_tensor(name):
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    cfg = json.loads((CONFIGS / f"{name}.json").read_text())
    with torch.device("meta"):
        model = tf.AutoModelForCausalLM.from_config(
            tf.AutoConfig.for_model(**cfg))
    hf = _expand({n: tuple(p.shape) for n, p in model.named_parameters()})
    a = A.from_hf_config(CONFIGS / f"{name}.json")
    ours = {n: s for n, s, _ in P.tensors(a)}
    assert ours == hf
    assert P.count(a)["total"] == sum(P.numel(s) for s in hf.values())


def test_records_read_the_routing():
    ds = A.from_hf_config(CONFIGS / "deepseek-v3.json")
    assert (ds.router, ds.norm_topk, ds.routed_scaling) == ("sigmoid",
                                                            True, 2.5)
    assert (ds.expert_groups, ds.group_top_k) == (8, 4)
    assert (ds.experts, ds.top_k, ds.shared_experts) == (256, 8, 1)
    assert (ds.first_dense_layers, ds.moe_layers) == (3, 58)
    assert (ds.q_lora_rank, ds.kv_lora_rank, ds.head_dim) == (1536, 512,
                                                              192)
    mx = A.from_hf_config(CONFIGS / "mixtral-8x7b.json")
    assert (mx.router, mx.norm_topk, mx.experts, mx.top_k) == (
        "softmax", True, 8, 2)
    q2 = A.from_hf_config(CONFIGS / "qwen1.5-moe-a2.7b.json")
    assert q2.shared_gate and not q2.norm_topk and q2.qkv_bias
    assert A.from_hf_config(CONFIGS / "mixtral-tiny.json").kv_heads == 8


@pytest.mark.parametrize("cfg, key", [
    ({"model_type": "qwen2_moe", "decoder_sparse_step": 2}, "decoder_spar"),
    ({"model_type": "qwen3_moe", "mlp_only_layers": [0]}, "mlp_only_lay"),
    ({"model_type": "mixtral", "num_hidden_layers": 1, "hidden_size": 64,
      "num_attention_heads": 8, "intermediate_size": 8, "vocab_size": 10,
      "num_experts_per_tok": 2}, "'num_local_experts'"),
    ({"model_type": "mixtral", "num_hidden_layers": 1, "hidden_size": 64,
      "num_attention_heads": 8, "intermediate_size": 8, "vocab_size": 10,
      "num_local_experts": 2, "num_experts_per_tok": 3}, "top_k"),
])
def test_bad_moe_configs_say_the_key(tmp_path, cfg, key):
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    r = _cli("params", "--hf-config", str(f))
    assert r.returncode == 2 and key in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""


def test_record_checks_the_moe_fields():
    base = A.preset("llama-tiny").with_(experts=8, top_k=2, expert_ffn=16)
    with pytest.raises(ValueError, match="router"):
        base.with_(router="relu")
    with pytest.raises(ValueError, match="expert_groups"):
        base.with_(expert_groups=3, group_top_k=1)
    with pytest.raises(ValueError, match="head_dim"):
        base.with_(kv_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=4,
                   v_head_dim=8)


@pytest.mark.parametrize("name, total, active", [
    ("qwen1.5-moe-a2.7b", 14.3, 2.7),   # the model cards: 14.3B, A2.7B
    ("qwen3-30b-a3b", 30.5, 3.3),       # 30.5B, 3.3B activated
])
def test_qwen_moe_published_sizes(name, total, active):
    # the cards give one decimal (Qwen3's 3.353B "3.3B": truncated)
    c = P.count(A.from_hf_config(CONFIGS / f"{name}.json"))
    assert abs(c["total"] / 1e9 - total) < 0.06
    assert abs(c["active"] / 1e9 - active) < 0.06


def test_moe_presets_are_the_published_configs():
    from labkit.predict.model import moe_presets
    for name, cfg in moe_presets.CONFIGS.items():
        on_disk = json.loads((CONFIGS / f"{name}.json").read_text())
        on_disk.pop("architectures", None)
        assert cfg == on_disk
        assert moe_presets.preset(name) == A.from_hf_config(
            CONFIGS / f"{name}.json").with_(name=name)
