"""labkit.predict.model.families: the block variants of today's decoders
read from their published config.json files, held to the published totals
and to transformers' own build on the meta device (a test-only oracle);
the sliding window's FLOPs; strict reads; the commands that answer."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.predict.model import hf_config
from labkit.predict.model import params as P
from labkit.predict.model.flops_arch import arch_flops, attention_span
from labkit.predict.model.record import Arch

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "tests" / "data" / "hf_configs_families"
# the model cards' totals, in the precision the cards print them
# (gpt-oss: 20.91 B total, 3.61 B active without the input embedding)
PUBLISHED = {"gemma2-9b": 9.24, "gpt-oss-20b": 20.91, "phi3-mini-4k": 3.82,
             "olmo2-7b": 7.30, "phi-2": 2.78, "qwen2.5-vl-7b": 8.29,
             "llama3.2-11b-vision": 10.67}


def _meta(path):
    """transformers' model of ``path`` on the meta device: (its language
    model's parameters, the rest's)."""
    return _meta_dict(json.loads(Path(path).read_text()))


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_configs_equal_the_build_and_the_card(name):
    path = CONFIGS / f"{name}.json"
    a = hf_config.read(path)
    c = P.count(a)
    lang, rest = _meta(path)
    assert c["total"] == lang
    assert round((lang + rest) / 1e9, 2) == PUBLISHED[name]
    assert bool(rest) == bool(a.multimodal)
    if name == "gpt-oss-20b":
        active = c["active"] - c["embedding"]
        assert round(active / 1e9, 2) == 3.61


def test_each_variant_is_a_field_not_a_family():
    read = {n: hf_config.read(CONFIGS / f"{n}.json") for n in PUBLISHED}
    g, o, p = read["gemma2-9b"], read["olmo2-7b"], read["phi-2"]
    assert (g.pre_norms, g.post_norms, g.mlp, g.head_dim) == (
        True, True, "geglu", 256)
    assert len(g.window_layers) == 21 and g.window == 4096
    assert (o.pre_norms, o.post_norms, o.qk_norm_full) == (False, True, True)
    assert p.parallel and p.head_bias and p.rotary_fraction == 0.4
    oss = read["gpt-oss-20b"]
    assert oss.sinks and oss.expert_bias and oss.window == 128
    assert read["phi3-mini-4k"].qkv_fused and read["phi3-mini-4k"].mlp_fused
    # an unseen family with the same features: the same rule
    llama = Arch(2, 64, 4, 100, mlp="swiglu", norm="rmsnorm",
                 positions="rope", qkv_bias=False, out_bias=False,
                 mlp_bias=False)
    norms = P.count(llama)["norms"]
    assert P.count(llama.with_(post_norms=True))["norms"] == \
        norms + 2 * 2 * 64
    assert P.count(llama.with_(parallel=True))["norms"] == norms - 2 * 64
    sinks = P.count(llama.with_(sinks=True))["total"]
    assert sinks == P.total(llama) + 2 * 4


@pytest.mark.parametrize("name", ["gemma2-9b", "phi3-mini-4k", "olmo2-7b",
                                  "phi-2", "llama3.2-11b-vision"])
def test_the_planners_stages_sum_to_the_record(name):
    """The pipeline planner's per-layer count (labkit.predict
    .tensor_parallel.gqa) reads the same fields: its stages add up to the
    record (a cross-attention layer by its own count, q/k norms and gates
    included)."""
    from labkit.predict.pipeline_parallel import stage_bytes as SB
    a = hf_config.read(CONFIGS / f"{name}.json")
    parts = (1, a.layers - 1)
    total = sum(SB.stage_params(a, 1, parts, i) for i in (0, 1))
    assert total == P.total(a) + (a.vocab * a.hidden if a.tied else 0)


def test_a_local_layer_spans_its_window():
    """Sliding window: the eager build computes (and counts) every masked
    score, and so does the record's model FLOPs (PaLM's convention, the
    causal half counted too); its windowed count is exactly the masked
    scores less."""
    pytest.importorskip("transformers")
    from labkit.measure.hf_build import measure_config
    cfg = json.loads((CONFIGS / "gemma2-9b.json").read_text())
    tiny = dict(cfg, num_hidden_layers=4, hidden_size=64, head_dim=16,
                num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=128, vocab_size=512, sliding_window=16)
    a = hf_config.read(tiny)
    seq, batch = 32, 2
    assert attention_span(a, seq, windowed=True) == 2 * seq + 2 * 16
    assert attention_span(a, seq) == 4 * seq
    got = measure_config(tiny, seq=seq, batch=batch)["flops"]
    mine = arch_flops(a, batch=batch, seq=seq)
    assert mine["model_flops"] == got
    masked = 3 * 2 * a.heads * 2 * a.head_dim * 2 * (seq - 16)
    assert got - mine["windowed_model_flops"] == masked * batch * seq


@pytest.mark.parametrize("key, value", [
    ("layer_types", ["full_attention"]), ("sliding_window", "4096"),
    ("partial_rotary_factor", 2), ("attn_logit_softcapping", "50"),
    ("use_bidirectional_attention", True)])
def test_a_hostile_value_is_one_line_naming_the_key(key, value):
    cfg = json.loads((CONFIGS / "gemma2-9b.json").read_text())
    if key == "partial_rotary_factor":
        cfg = json.loads((CONFIGS / "phi-2.json").read_text())
    with pytest.raises(ValueError, match=key) as e:
        hf_config.read(dict(cfg, **{key: value}))
    assert "\n" not in str(e.value)


def test_the_record_refuses_an_impossible_block():
    base = dict(layers=2, hidden=64, heads=4, vocab=100, positions="rope")
    for bad in (dict(pre_norms=False), dict(parallel=True, post_norms=True),
                dict(qk_norm_full=True), dict(sinks="yes"),
                dict(window=8), dict(window=8, window_layers=(2,)),
                dict(attn_softcap=-1.0), dict(cross_layers=(0, 1))):
        with pytest.raises(ValueError):
            Arch(**base, **bad)


def test_the_commands_answer_these_families():
    path = str(CONFIGS / "gemma2-9b.json")
    run = [sys.executable, "-m", "labkit"]
    out = {}
    for cmd in (["params", "--hf-config", path, "--json"],
                ["memory", "--hf-config", str(CONFIGS / "gpt-oss-20b.json"),
                 "--gpus", "8"],
                ["plan", "--hf-config", path, "--seq", "4096", "--gpus",
                 "8", "--batch", "64", "--top", "1"]):
        r = subprocess.run(run + cmd, capture_output=True, text=True,
                           cwd=ROOT, timeout=300)
        assert r.returncode == 0, r.stderr
        out[cmd[0]] = r.stdout
    assert json.loads(out["params"])["total"] == 9_241_705_984
    assert "headroom" in out["memory"]
    assert "gemma2-9b: 9.2 B parameters" in out["plan"]
    r = subprocess.run(run + ["params", "--hf-config",
                              str(CONFIGS / "qwen2.5-vl-7b.json")],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert "language model of qwen2_5_vl" in r.stdout


def test_gemma3s_image_text_config_reads_its_language_model():
    """Gemma 3 (image-text): its text_config is Gemma 3's decoder; the
    SigLIP tower and projector are named apart (transformers builds it on
    the meta device; labkit build measures it on fake tensors,
    tests/test_measure_hf_build.py)."""
    text = dict(vocab_size=512, hidden_size=64, intermediate_size=128,
                num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16,
                model_type="gemma3_text")
    cfg = dict(model_type="gemma3", text_config=text, mm_tokens_per_image=4,
               vision_config=dict(num_hidden_layers=1, hidden_size=32,
                                  intermediate_size=64, image_size=28,
                                  num_attention_heads=2, patch_size=14))
    a = hf_config.read(cfg)
    assert a.multimodal == "gemma3" and a.post_norms and a.qk_norm
    lang, rest = _meta_dict(cfg)
    assert P.total(a) == lang and rest > 0


def _meta_dict(cfg):
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    from labkit.measure.hf_build import _auto, _split
    tf.logging.set_verbosity_error()
    c = tf.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        return _split(_auto(c).from_config(c))
