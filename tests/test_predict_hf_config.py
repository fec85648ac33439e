"""labkit.predict.model.hf_config under hostile values: a number read from a
config.json is checked as its flag is (labkit.cli_rules.HF_KEYS), a
boolean must be a JSON boolean as transformers 5 requires, a null takes
transformers' default; every refusal is one line naming the key and the
file, from ``python -m labkit`` within seconds."""
import json
import os
import time
from pathlib import Path

import pytest

from labkit import __main__ as cli
from labkit.predict.model import hf_config

DATA = Path(__file__).resolve().parent / "data"
LLAMA = json.loads((DATA / "hf_configs" / "llama3-8b.json").read_text())
MOE = json.loads((DATA / "hf_configs_moe" / "deepseek-v3.json").read_text())
HOSTILE = [
    ("num_hidden_layers", 10 ** 12), ("num_hidden_layers", 1e12),
    ("num_hidden_layers", "lots"), ("num_hidden_layers", 2.5),
    ("num_hidden_layers", True), ("num_hidden_layers", -1),
    ("hidden_size", 2 ** 40), ("vocab_size", 0),
    ("intermediate_size", 1e300), ("num_key_value_heads", "8"),
    ("head_dim", 0), ("max_position_embeddings", "lots"),
    ("max_position_embeddings", 2 ** 60), ("rms_norm_eps", "lots"),
    ("rms_norm_eps", 0), ("rope_theta", -1.0), ("rope_theta", 1e300),
    ("tie_word_embeddings", "false"), ("attention_bias", "false"),
    ("mlp_bias", "no"), ("tie_word_embeddings", 0),
    ("attention_bias", None),
]
MOE_HOSTILE = [("n_routed_experts", 10 ** 9), ("num_experts_per_tok", "8"),
               ("norm_topk_prob", "false"), ("q_lora_rank", "lots"),
               ("routed_scaling_factor", float("inf")),
               ("n_group", -3), ("first_k_dense_replace", 10 ** 7)]


def _refused(tmp_path, base, key, value, capsys, command=("params",)):
    cfg = dict(base, **{key: value})
    f = tmp_path / "hostile.json"
    f.write_text(json.dumps(cfg))
    os.environ["LABKIT_CLI_TIMEOUT_S"] = "60"
    t = time.monotonic()
    with pytest.raises(ValueError) as e:
        hf_config.read(f)
    assert key in str(e.value) and str(f) in str(e.value), e.value
    rc = cli.main([*command, "--hf-config", str(f)])
    err = capsys.readouterr().err
    assert time.monotonic() - t < 60
    assert rc == 2 and err.count("\n") == 1, err
    assert repr(key) in err and str(f) in err, err


@pytest.mark.parametrize("key,value", HOSTILE,
                         ids=[f"{k}={v!r}" for k, v in HOSTILE])
def test_a_hostile_value_is_one_line_naming_key_and_file(
        key, value, tmp_path, capsys):
    _refused(tmp_path, LLAMA, key, value, capsys)


@pytest.mark.parametrize("key,value", MOE_HOSTILE,
                         ids=[f"{k}={v!r}" for k, v in MOE_HOSTILE])
def test_a_hostile_moe_value_is_one_line(key, value, tmp_path, capsys):
    _refused(tmp_path, MOE, key, value, capsys)


def test_the_other_commands_refuse_it_too(tmp_path, capsys):
    for command in (["memory"], ["flops", "--seq", "8", "--batch", "1"],
                    ["plan", "--batch", "8", "--gpus", "8"],
                    ["dryrun", "--seq", "8"]):
        _refused(tmp_path, LLAMA, "num_hidden_layers", 10 ** 12, capsys,
                 command)


def test_real_booleans_and_transformers_defaults_for_null():
    untied = hf_config.read(dict(LLAMA, tie_word_embeddings=False))
    tied = hf_config.read(dict(LLAMA, tie_word_embeddings=True))
    assert not untied.tied and tied.tied
    gpt2 = json.loads((DATA / "hf_configs" / "gpt2.json").read_text())
    # GPT2Config keeps n_inner None and GPT2MLP uses 4 * n_embd
    rec = hf_config.read(dict(gpt2, n_inner=None))
    assert rec.ffn == 4 * gpt2["n_embd"]
    kv = hf_config.read(dict(LLAMA, num_key_value_heads=None))
    assert kv.kv_heads == LLAMA["num_attention_heads"]
    whole = hf_config.read(dict(LLAMA, num_hidden_layers=32.0))
    assert whole.layers == 32 and isinstance(whole.layers, int)


def test_transformers_refuses_the_strings_we_refuse():
    """What transformers 5 itself does with "false" (its strict config
    dataclasses): refused, not read as true."""
    transformers = pytest.importorskip("transformers")
    with pytest.raises(Exception, match="expected bool"):
        transformers.LlamaConfig(tie_word_embeddings="false")
    assert transformers.GPT2Config(n_inner=None).n_inner is None
