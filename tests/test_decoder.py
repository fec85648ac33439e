"""labkit.nn.decoder: its parameters are the record's count for every preset
and test config (tiny sizes on CPU, real sizes on the meta device), and
its forward pass is transformers' for the same weights (test-only oracle).
"""
import json
import re
from pathlib import Path

import pytest
import torch

from labkit import arch as A
from labkit.nn.model import (GPTConfig, arch_of, batch, build, build_arch,
                             count_params)
from labkit.predict.model import params as P

CONFIGS = Path(__file__).resolve().parent / "data" / "hf_configs"


def _build(a):
    if P.total(a) < 5e6:
        return build_arch(a)
    with torch.device("meta"):
        return build_arch(a)


@pytest.mark.parametrize("name", list(A.PRESETS))
def test_presets_count(name):
    a = A.preset(name)
    assert count_params(_build(a)) == P.total(a)


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")),
                         ids=lambda p: p.stem)
def test_configs_count(path):
    a = A.from_hf_config(path)
    m = _build(a)
    assert count_params(m) == P.total(a)
    ours = sorted(p.numel() for p in m.parameters())
    assert ours == sorted(P.numel(s) for _, s, _ in P.tensors(a))


def test_gpt_preset_is_the_course_gpt():
    c = GPTConfig()
    assert arch_of(c) == A.preset("gpt-tiny").with_(name="")
    assert count_params(build(c)) == count_params(build_arch(arch_of(c)))


def test_the_gpt_is_the_decoder_with_the_gpt_names():
    """One model: labkit.nn.model.GPT is the decoder on the GPT preset, and
    keeps the names its TP runs and checkpoints use (fused qkv, fc/proj)."""
    from labkit.nn.decoder import Decoder
    m = build(GPTConfig())
    assert isinstance(m, Decoder) and m.arch.qkv_fused
    names = [n for n, _ in m.named_parameters()]
    assert names[:14] == [
        "embed.tok.weight", "embed.pos.weight",
        *(f"blocks.0.{n}" for n in (
            "ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias",
            "attn.proj.weight", "attn.proj.bias", "ln2.weight", "ln2.bias",
            "mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight",
            "mlp.proj.bias"))]
    assert names[-3:] == ["head.ln_f.weight", "head.ln_f.bias",
                          "head.out.weight"]


def test_arch_llama_at_the_course_size_is_llama_tiny():
    c = GPTConfig(arch="llama")
    assert arch_of(c) == A.preset("llama-tiny").with_(name="")
    assert count_params(build(c)) == P.total(arch_of(c))
    with pytest.raises(ValueError, match="arch must be one of gpt, llama"):
        GPTConfig(arch="mamba")


def test_moe_record_builds_and_counts():
    a = A.preset("llama-tiny").with_(experts=4, top_k=2, expert_ffn=32,
                                     shared_experts=1, first_dense_layers=1)
    m = build_arch(a)
    assert count_params(m) == P.total(a)
    x, y = batch(GPTConfig(vocab=a.vocab, seq=16), 2, step=0)
    m(x, y).backward()


def test_llama_tiny_learns():
    a = A.preset("llama-tiny")
    m = build_arch(a)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    c = GPTConfig(vocab=a.vocab, seq=32)
    losses = []
    for step in range(15):
        x, y = batch(c, 8, step)
        loss = m(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.5, losses


HF_NAME = [(r"^embed\.tok\.", "model.embed_tokens."),
           (r"^blocks\.(\d+)\.ln1\.", r"model.layers.\1.input_layernorm."),
           (r"^blocks\.(\d+)\.ln2\.",
            r"model.layers.\1.post_attention_layernorm."),
           (r"^blocks\.(\d+)\.attn\.([qkvo])\.", r"model.layers.\1.self_attn.\2_proj."),
           (r"^blocks\.(\d+)\.attn\.([qk]_norm)\.",
            r"model.layers.\1.self_attn.\2."),
           (r"^blocks\.(\d+)\.mlp\.(gate|up|down)\.",
            r"model.layers.\1.mlp.\2_proj."),
           (r"^head\.ln_f\.", "model.norm."), (r"^head\.out\.", "lm_head.")]


def _hf_name(n):
    for pat, rep in HF_NAME:
        if re.match(pat, n):
            return re.sub(pat, rep, n)
    raise AssertionError(n)


@pytest.mark.parametrize("name", ["tiny-llama-tied", "llama-mqa",
                                  "llama-biases-head-dim",
                                  "qwen3-tiny-default-head-dim",
                                  "mistral-default-kv"])
def test_forward_equals_transformers(name):
    tf = pytest.importorskip("transformers")
    cfg = json.loads((CONFIGS / f"{name}.json").read_text())
    config = tf.AutoConfig.for_model(**cfg)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    hf = tf.AutoModelForCausalLM.from_config(config).eval()
    ours = build_arch(A.from_hf_config(CONFIGS / f"{name}.json")).eval()
    theirs = dict(hf.named_parameters())
    with torch.no_grad():
        for n, p in ours.named_parameters():
            p.copy_(theirs[_hf_name(n)])
    idx = torch.randint(0, cfg["vocab_size"], (2, 12))
    with torch.no_grad():
        want = hf(input_ids=idx).logits
        got = ours(idx)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


FAMILIES = Path(__file__).resolve().parent / "data" / "hf_configs_families"


def _tiny(a):
    """``a`` at a size that trains on CPU in milliseconds, every variant
    kept: 3 layers, local layers and cross layers moved below 3, a window
    of 4, experts of 32."""
    kw = dict(layers=3, hidden=64, heads=4, kv_heads=2, head_dim=16,
              ffn=128, vocab=96, max_seq=64, name=f"tiny-{a.name}")
    if a.window:
        kw.update(window=4, window_layers=(0, 2))
    if a.cross_layers:
        kw.update(cross_layers=(1,))
    if a.experts:
        kw.update(experts=4, top_k=2, expert_ffn=32)
    return a.with_(**kw)


@pytest.mark.parametrize("path", sorted(FAMILIES.glob("*.json")),
                         ids=lambda p: p.stem)
def test_families_build_at_real_size_and_tiny(path):
    """Every variant the record carries is built: the published config's
    parameters on the meta device are the record's (which the family
    tests hold to transformers' own build), and a tiny one of the same
    family counts the same, runs forward and backward, and its loss is
    finite."""
    a = A.from_hf_config(path)
    with torch.device("meta"):
        assert count_params(build_arch(a)) == P.total(a)
    t = _tiny(a)
    assert t.extras == a.extras
    m = build_arch(t)
    assert count_params(m) == P.total(t)
    x, y = batch(GPTConfig(vocab=t.vocab, seq=12), 2, step=0)
    loss = m(x, y)
    loss.backward()
    assert torch.isfinite(loss)
    if t.cross_layers:   # skipped by a text-only step, as Mllama's
        assert all(p.grad is None for p in m.blocks[1].parameters())


def test_post_norms_and_full_qk_norm_forward_equal_olmo2():
    """OLMo 2's reordered norms (on each branch's output, none before)
    and its q/k norms over all heads: the same logits as transformers'
    Olmo2ForCausalLM with the same weights (test-only oracle)."""
    tf = pytest.importorskip("transformers")
    config = tf.AutoConfig.for_model(
        "olmo2", vocab_size=96, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64, pad_token_id=None, bos_token_id=None,
        eos_token_id=None)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    hf = tf.AutoModelForCausalLM.from_config(config).eval()
    cfg = dict(config.to_dict(), model_type="olmo2")
    a = A.from_hf_config(cfg)
    assert (a.pre_norms, a.post_norms, a.qk_norm_full) == (False, True, True)
    ours = build_arch(a).eval()
    theirs = dict(hf.named_parameters())
    post = [(r"^blocks\.(\d+)\.post_attn\.",
             r"model.layers.\1.post_attention_layernorm."),
            (r"^blocks\.(\d+)\.post_mlp\.",
             r"model.layers.\1.post_feedforward_layernorm.")]
    with torch.no_grad():
        for n, p in ours.named_parameters():
            for pat, rep in post:
                if re.match(pat, n):
                    p.copy_(theirs[re.sub(pat, rep, n)])
                    break
            else:
                p.copy_(theirs[_hf_name(n)])
        idx = torch.randint(0, 96, (2, 12))
        want = hf(input_ids=idx).logits
        got = ours(idx)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_sinks_and_sliding_window_forward_equal_gpt_oss():
    """gpt-oss's attention: a learned sink per head in the softmax, a
    window of 4 on layer 0, biases on every projection; the experts'
    outputs zeroed in both models (gpt-oss's clamped SwiGLU is not the
    course's), so the logits are the attention's and equal
    transformers' GptOssForCausalLM's (RoPE without YaRN: the record has
    no YaRN)."""
    tf = pytest.importorskip("transformers")
    config = tf.AutoConfig.for_model(
        "gpt_oss", vocab_size=96, hidden_size=64, intermediate_size=32,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, num_local_experts=4, num_experts_per_tok=2,
        sliding_window=4, layer_types=["sliding_attention",
                                       "full_attention"],
        max_position_embeddings=64, pad_token_id=None, bos_token_id=None,
        eos_token_id=None,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    hf = tf.AutoModelForCausalLM.from_config(config).eval()
    a = A.from_hf_config(dict(config.to_dict(), model_type="gpt_oss"))
    assert (a.sinks, a.window, a.window_layers) == (True, 4, (0,))
    ours = build_arch(a).eval()
    theirs = dict(hf.named_parameters())
    with torch.no_grad():
        for n, p in theirs.items():
            if ".experts.down_proj" in n:
                p.zero_()
            elif n.endswith(".sinks"):
                p.normal_()
        for n, p in ours.named_parameters():
            if ".mlp." in n:
                if ".down." in n:
                    p.zero_()
                continue
            m = re.match(r"^blocks\.(\d+)\.attn\.sinks$", n)
            p.copy_(theirs[f"model.layers.{m.group(1)}.self_attn.sinks"]
                    if m else theirs[_hf_name(n)])
        idx = torch.randint(0, 96, (2, 12))
        want = hf(input_ids=idx).logits
        got = ours(idx)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


PHI_NAME = [(r"^embed\.tok\.", "model.embed_tokens."),
            (r"^blocks\.(\d+)\.ln1\.", r"model.layers.\1.input_layernorm."),
            (r"^blocks\.(\d+)\.attn\.([qkv])\.",
             r"model.layers.\1.self_attn.\2_proj."),
            (r"^blocks\.(\d+)\.attn\.o\.",
             r"model.layers.\1.self_attn.dense."),
            (r"^blocks\.(\d+)\.mlp\.fc\.", r"model.layers.\1.mlp.fc1."),
            (r"^blocks\.(\d+)\.mlp\.proj\.", r"model.layers.\1.mlp.fc2."),
            (r"^head\.ln_f\.", "model.final_layernorm."),
            (r"^head\.out\.", "lm_head.")]


def test_parallel_partial_rotary_head_bias_forward_equal_phi():
    """Phi's block: attention and MLP read one LayerNorm, RoPE turns half
    of each head, the output layer has a bias: the same logits as
    transformers' PhiForCausalLM (with exact GELU, the course's MLP;
    Phi-2's ``gelu_new`` is its tanh approximation, no other bytes)."""
    tf = pytest.importorskip("transformers")
    config = tf.AutoConfig.for_model(
        "phi", vocab_size=96, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, hidden_act="gelu",
        partial_rotary_factor=0.5, max_position_embeddings=64,
        pad_token_id=None, bos_token_id=None, eos_token_id=None)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    hf = tf.AutoModelForCausalLM.from_config(config).eval()
    a = A.from_hf_config(dict(config.to_dict(), model_type="phi"))
    assert (a.parallel, a.rotary_fraction, a.head_bias) == (True, 0.5, True)
    ours = build_arch(a).eval()
    theirs = dict(hf.named_parameters())
    with torch.no_grad():
        for n, p in ours.named_parameters():
            pat, rep = next(m for m in PHI_NAME if re.match(m[0], n))
            p.copy_(theirs[re.sub(pat, rep, n)])
        idx = torch.randint(0, 96, (2, 12))
        want = hf(input_ids=idx).logits
        got = ours(idx)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
