"""The universal check: transformers builds the config on fake tensors and
the step is measured; the record's closed forms equal it for every family
the record knows, and a family it does not know is answered all the same."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from labkit.measure.hf_build import _grouped_mm_flops, measure_config  # noqa
from labkit.predict.model import hf_config  # noqa: E402
from labkit.predict.model.flops_arch import arch_flops  # noqa: E402
from labkit.predict.model.params import total  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SEQ = 32
NOTOK = dict(pad_token_id=None, bos_token_id=None, eos_token_id=None)
SMALL = dict(NOTOK, vocab_size=512, hidden_size=64, intermediate_size=128,
             num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256)
MOE = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32)
KNOWN = {
    "llama": SMALL, "qwen3": dict(SMALL, head_dim=16),
    "mistral": SMALL, "qwen2": SMALL,
    "qwen3_moe": dict(SMALL, head_dim=16, **MOE),
    "mixtral": dict(SMALL, num_local_experts=8, num_experts_per_tok=2),
    "deepseek_v3": dict(
        SMALL, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=16,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12,
        first_k_dense_replace=1, n_routed_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=32, n_group=1, topk_group=1),
    # the block variants (labkit.predict.model.families)
    "gemma2": dict(SMALL, head_dim=16), "gemma3_text": dict(SMALL,
                                                          head_dim=16),
    "phi3": SMALL, "phi": dict(SMALL, qk_layernorm=True), "olmo2": SMALL,
    "olmo3": SMALL,
    "gpt_oss": dict(SMALL, head_dim=16, num_local_experts=4,
                    num_experts_per_tok=2,
                    layer_types=["sliding_attention", "full_attention"]),
}
# Families the record does not read: measured all the same
UNKNOWN = {"starcoder2": SMALL, "stablelm": SMALL}


def _write(tmp_path, kind, kw):
    cfg = transformers.AutoConfig.for_model(kind, **kw)
    d = cfg.to_dict()
    d["model_type"] = kind
    path = tmp_path / f"{kind}.json"
    path.write_text(json.dumps(d))
    return path, cfg


def _meta_params(cfg, auto=transformers.AutoModelForCausalLM):
    with torch.device("meta"):
        m = auto.from_config(cfg)
    return sum({id(p): p.numel() for p in m.parameters()}.values())


@pytest.mark.parametrize("kind", sorted(KNOWN))
def test_the_record_equals_the_build(tmp_path, kind):
    path, cfg = _write(tmp_path, kind, KNOWN[kind])
    got = measure_config(path, seq=SEQ, batch=2)
    a = hf_config.read(path)
    assert got["params"] == total(a) == _meta_params(cfg)
    assert got["flops"] == arch_flops(a, batch=2, seq=SEQ)["model_flops"]
    assert got["activation_bytes"] > 0


@pytest.mark.parametrize("kind", sorted(UNKNOWN))
def test_a_family_the_record_does_not_know(tmp_path, kind):
    path, cfg = _write(tmp_path, kind, UNKNOWN[kind])
    with pytest.raises(ValueError, match="not supported"):
        hf_config.read(path)
    got = measure_config(path, seq=SEQ, batch=1)
    assert got["params"] == _meta_params(cfg)
    assert got["flops"] > 6 * got["params"] * SEQ * 0.5
    assert got["activation_bytes"] > 0


VISION = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2,
              out_hidden_size=64)
MULTIMODAL = {
    "qwen2_5_vl": dict(NOTOK, vision_config=VISION, text_config=dict(
        SMALL, model_type="qwen2_5_vl_text",
        rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]})),
    "qwen3_vl": dict(NOTOK, vision_config=dict(
        VISION, deepstack_visual_indexes=[]), text_config=dict(
        SMALL, model_type="qwen3_vl_text", head_dim=16,
        rope_scaling={"rope_type": "default", "mrope_section": [2, 3, 3]})),
    # Llama 3.2 Vision: cross-attention layers, skipped by a text-only step
    "mllama": dict(text_config=dict(
        SMALL, num_hidden_layers=4, cross_attention_layers=[1],
        pad_token_id=0, bos_token_id=1, eos_token_id=2),
        vision_config=dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_global_layers=1, attention_heads=2, image_size=28,
            patch_size=14, vision_output_dim=64,
            intermediate_layers_indices=[0])),
    # Gemma 3 (image-text): SigLIP's initialiser reads a value back, which
    # a fake tensor has not (the build skips initialisation)
    "gemma3": dict(NOTOK, mm_tokens_per_image=4, text_config=dict(
        SMALL, model_type="gemma3_text", head_dim=16),
        vision_config=dict(num_hidden_layers=1, hidden_size=32,
                           intermediate_size=64, image_size=28,
                           num_attention_heads=2, patch_size=14)),
}


@pytest.mark.parametrize("kind", sorted(MULTIMODAL))
def test_a_multimodal_config_is_measured_on_its_language_model(tmp_path,
                                                               kind):
    path, cfg = _write(tmp_path, kind, MULTIMODAL[kind])
    got = measure_config(path, seq=SEQ, batch=2)
    whole = _meta_params(cfg, transformers.AutoModelForImageTextToText)
    assert got["params"] + got["other_params"] == whole
    assert 0 < got["other_params"] < whole and got["whole_model"]
    a = hf_config.read(path)    # the record: the language model, named
    assert a.multimodal == kind and total(a) == got["params"]
    assert got["flops"] == arch_flops(a, batch=2, seq=SEQ)["model_flops"]


def test_gemma3_4b_image_text_at_real_size():
    """The published Gemma 3 4B (``gemma3-4b-it.json``, written from the
    model card): the language model built on fake tensors equals the
    record to the parameter and the FLOP, SigLIP and the projector named
    apart (4.30 B in all, as the model card says)."""
    path = ROOT / "tests" / "data" / "hf_configs_families" / \
        "gemma3-4b-it.json"
    got = measure_config(path, seq=256, batch=1)
    a = hf_config.read(path)
    assert got["params"] == total(a) == 3_880_263_168
    assert got["params"] + got["other_params"] == 4_300_079_472
    assert got["language_model"] == "gemma3_text" and got["whole_model"]
    assert got["flops"] == arch_flops(a, batch=1, seq=256)["model_flops"]


def test_grouped_mm_counts_two_m_k_n():
    assert _grouped_mm_flops((10, 4), (3, 4, 5)) == 2 * 10 * 4 * 5
    assert _grouped_mm_flops((4, 10), (10, 5)) == 2 * 4 * 10 * 5


def test_cli_says_what_it_measured_and_refuses_in_one_line(tmp_path):
    path, _ = _write(tmp_path, "stablelm", UNKNOWN["stablelm"])
    r = subprocess.run([sys.executable, "-m", "labkit", "build",
                        "--hf-config", str(path), "--seq", "16"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "does not know this family" in r.stdout
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model_type": "no_such_family"}))
    r = subprocess.run([sys.executable, "-m", "labkit", "build",
                        "--hf-config", str(bad), "--seq", "16"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "no_such_family" in r.stderr
