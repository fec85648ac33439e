"""labkit.predict.model.params against the published totals and, tensor by
tensor, against transformers' own build of the same config.json (a
test-only oracle, on the meta device: no memory, no download)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from labkit import arch as A
from labkit.predict.model import params as P
from labkit.predict.memory import gpt_params

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "tests" / "data" / "hf_configs"
PUBLISHED = {   # the model cards' totals
    "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496,
    "llama3.1-405b": 405_853_388_800,
    "llama2-70b": 68_976_648_192,
}
OURS = sorted(p.stem for p in CONFIGS.glob("*.json")
              if p.stem not in PUBLISHED)


def _cli(*argv):
    return subprocess.run([sys.executable, "-m", "labkit", *argv],
                          capture_output=True, text=True, cwd=ROOT)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_totals_from_the_cli(name):
    r = _cli("params", "--hf-config", str(CONFIGS / f"{name}.json"),
             "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["total"] == out["active"] == PUBLISHED[name]
    assert sum(out[c] for c in P.COMPONENTS) == out["total"]


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_presets_are_the_published_configs(name):
    a = A.from_hf_config(CONFIGS / f"{name}.json")
    assert a == A.preset(name).with_(name=a.name)
    assert P.total(A.preset(name)) == PUBLISHED[name]


def test_gpt_presets_keep_the_old_counts():
    from labkit.predict.model.shapes import SHAPES
    for m in SHAPES.values():
        a = A.gpt(m.layers, m.hidden, m.heads, m.vocab, m.seq)
        assert a in [p.with_(name="") for p in A.PRESETS.values()]
        assert P.total(a) == gpt_params(m.layers, m.hidden, m.heads,
                                        m.vocab, m.seq)
    tied = A.gpt(4, 128, 4, 1000, 64, tied=True, final_norm=False)
    assert P.total(tied) == gpt_params(4, 128, 4, 1000, 64, tied=True,
                                       final_norm=False)


def _hf_tensors(path):
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    cfg = json.loads(Path(path).read_text())
    config = tf.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = tf.AutoModelForCausalLM.from_config(config)
    return {n: tuple(p.shape) for n, p in model.named_parameters()}


def _component(name):
    for key, part in (("wte", "embedding"), ("wpe", "embedding"),
                      ("embed_tokens", "embedding"), ("lm_head", "head"),
                      ("norm", "norms"), ("ln_", "norms"),
                      ("attn", "attention"), ("mlp", "mlp")):
        if key in name and not (key == "norm" and "_norm" in name):
            return part
    raise AssertionError(name)


@pytest.mark.parametrize("name", OURS + sorted(PUBLISHED)[:1])
def test_equals_transformers_tensor_by_tensor(name):
    path = CONFIGS / f"{name}.json"
    hf = _hf_tensors(path)
    ours = P.tensors(A.from_hf_config(path))
    c = P.count(A.from_hf_config(path))
    assert c["total"] == sum(P.numel(s) for s in hf.values())
    if json.loads(path.read_text())["model_type"] == "gpt2":
        # GPT-2 fuses Q, K, V into one Conv1D: compare per component
        for part in P.COMPONENTS:
            want = sum(P.numel(s) for n, s in hf.items()
                       if _component(n) == part)
            assert c[part] == want, part
        return
    hf = {n.removeprefix("model."): s for n, s in hf.items()}
    assert {n: s for n, s, _ in ours} == hf
    for n, _, part in ours:
        assert _component(n) == part, n


@pytest.mark.parametrize("cfg, key", [
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
      "intermediate_size": 8, "vocab_size": 10}, "'num_hidden_layers'"),
    ({"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 66,
      "num_attention_heads": 4, "intermediate_size": 8, "vocab_size": 10},
     "'head_dim'"),
    ({"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 64,
      "num_attention_heads": 4, "num_key_value_heads": 3,
      "intermediate_size": 8, "vocab_size": 10}, "'num_key_value_heads'"),
    ({"model_type": "mixtral", "num_local_experts": 8}, "num_experts_per_tok"),
])
def test_bad_configs_say_the_key(tmp_path, cfg, key):
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        A.from_hf_config(f)
    r = _cli("params", "--hf-config", str(f))
    assert r.returncode == 2 and key in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""


def test_a_family_neither_reads_is_one_line(tmp_path):
    """The record names what it reads; the command line then asks
    transformers' build (labkit.measure.hf_build.unknown), and a
    model_type the installed transformers cannot read either is one
    line."""
    f = tmp_path / "config.json"
    f.write_text(json.dumps({"model_type": "no_such_family"}))
    with pytest.raises(ValueError, match="supported: llama, mistral"):
        A.from_hf_config(f)
    r = _cli("params", "--hf-config", str(f))
    assert r.returncode == 2 and "cannot read model_type" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""


def test_missing_file_and_not_json(tmp_path):
    r = _cli("params", "--hf-config", str(tmp_path / "nope.json"))
    assert r.returncode == 2 and "no such file" in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = _cli("params", "--hf-config", str(bad))
    assert r.returncode == 2 and "not JSON" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_moe_fields_count_active_experts():
    dense = A.preset("llama-tiny")
    moe = dense.with_(experts=4, top_k=2, expert_ffn=32)
    c = P.count(moe)
    one = 3 * moe.hidden * 32
    assert c["total"] - c["active"] == moe.layers * 2 * one
    assert c["mlp"] == moe.layers * (4 * one + moe.hidden * 4)
    with pytest.raises(ValueError, match="top_k"):
        dense.with_(experts=4, expert_ffn=32)


def test_record_rejects_bad_fields():
    with pytest.raises(ValueError, match="kv_heads"):
        A.Arch(2, 64, 4, 10, kv_heads=3, max_seq=8)
    with pytest.raises(ValueError, match="head_dim"):
        A.Arch(2, 66, 4, 10, max_seq=8)
    with pytest.raises(ValueError, match="mlp"):
        A.Arch(2, 64, 4, 10, mlp="relu", max_seq=8)
    assert A.Arch(2, 66, 4, 10, head_dim=16, max_seq=8).q_dim == 64
