"""The record's fallback (labkit.measure.hf_build.unknown): params,
memory and flops of a family the record does not read answer from
transformers' own build and say so; the sizes the frameworks' terms read
equal the record's where the record knows the family."""
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from labkit.__main__ import main  # noqa: E402
from labkit.measure.hf_build.unknown import meta_params  # noqa: E402
from labkit.predict.memory.frameworks import record_sizes  # noqa: E402
from labkit.predict.model import hf_config  # noqa: E402

SMALL = dict(pad_token_id=None, bos_token_id=None, eos_token_id=None,
             vocab_size=512, hidden_size=64, intermediate_size=128,
             num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256)


def _write(tmp_path, kind, kw=SMALL):
    d = transformers.AutoConfig.for_model(kind, **kw).to_dict()
    d["model_type"] = kind
    path = tmp_path / f"{kind}.json"
    path.write_text(json.dumps(d))
    return path, d


def _meta(d):
    cfg = transformers.AutoConfig.for_model(**d)
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(cfg)
    return sum({id(p): p.numel() for p in m.parameters()}.values())


def test_params_of_an_unknown_family_are_transformers_count(tmp_path,
                                                            capsys):
    path, d = _write(tmp_path, "starcoder2")
    with pytest.raises(hf_config.UnknownFamily):
        hf_config.read(path)
    assert main(["params", "--hf-config", str(path), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["total"] == got["params"] == _meta(d)
    assert got["record"] is None and "meta" in got["measured_by"]
    assert main(["params", "--hf-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "does not know this family" in out and f"{_meta(d):,}" in out


def test_memory_of_an_unknown_family_has_the_frameworks_terms(tmp_path,
                                                              capsys):
    path, d = _write(tmp_path, "starcoder2")
    argv = ["memory", "--hf-config", str(path), "--gpus", "8",
            "--gpu-mem", "80", "--stage", "3", "--framework", "fsdp2"]
    assert main(argv + ["--json"]) == 0
    cap = capsys.readouterr()
    assert "does not know this family" in cap.err
    assert json.loads(cap.out)       # stdout stays JSON
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"{_meta(d):,} parameters" in out and "headroom" in out


def test_flops_of_an_unknown_family_are_counted(tmp_path, capsys):
    path, d = _write(tmp_path, "starcoder2")
    assert main(["flops", "--hf-config", str(path), "--seq", "16",
                 "--batch", "3", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    n = _meta(d)
    assert got["params"] == n and got["tokens"] == 48
    # a step is at least 6 N per token (the embedding's gather is not a
    # matmul: the bound is on the matmul parameters, half the total here)
    assert got["model_flops"] > 6 * n * 48 * 0.5


def test_plan_keeps_the_records_one_line(tmp_path, capsys):
    path, _ = _write(tmp_path, "starcoder2")
    assert main(["plan", "--hf-config", str(path), "--gpus", "8",
                 "--batch", "8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "labkit build" in err


@pytest.mark.parametrize("kind", ["mixtral", "phi3", "olmo2"])
def test_sizes_on_the_build_equal_the_records(tmp_path, kind):
    kw = dict(SMALL, num_local_experts=4, num_experts_per_tok=2) \
        if kind == "mixtral" else SMALL
    path, _ = _write(tmp_path, kind, kw)
    assert meta_params(path)["sizes"] == record_sizes(hf_config.read(path))


def test_gpt_oss_expert_biases_persist_as_transformers_stores_them():
    """gpt-oss's expert biases are two fused tensors a layer ([E, 2F] and
    [E, H]): DeepSpeed's persistence threshold (1e5 elements) keeps the
    second whole and shards the first, as the built model shows."""
    path = (Path(__file__).parent / "data" / "hf_configs_families"
            / "gpt-oss-20b.json")
    got = meta_params(path)["sizes"]
    assert got == record_sizes(hf_config.read(path))


def test_an_unknown_family_with_experts_is_unknown_first():
    """The expert keys' rule (no top-k: one line) is the record's, for the
    families it reads; an unknown family's keys are transformers' to
    read."""
    with pytest.raises(hf_config.UnknownFamily):
        hf_config.read({"model_type": "kimi_linear", "num_experts": 8})
    with pytest.raises(ValueError, match="num_experts_per_tok"):
        hf_config.read({"model_type": "qwen3_moe", "num_experts": 8})
