"""The framework terms beside the ledger, held to the installed DeepSpeed's
own estimator and to transformers' build of the same config."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.predict.memory import frameworks as F
from labkit.predict.model import hf_config
from labkit.predict.model.params import total

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "tests" / "data" / "hf_configs"
MODELS = ("llama3-8b", "qwen2-7b", "mistral-nemo-12b")


def _meta_sizes(name):
    """Total and DeepSpeed's largest layer (most parameters held directly
    by one module, ``stage3.model_to_params``' rule) of transformers'
    own build on the meta device."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.from_pretrained(CONFIGS / f"{name}.json")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    largest = max(sum(p.numel() for p in m.parameters(recurse=False))
                  for m in model.modules())
    return sum(p.numel() for p in model.parameters()), largest


def _estimators():
    pytest.importorskip("deepspeed")
    from labkit.measure.zero.estimators import _ds_estimators
    return _ds_estimators()


@pytest.mark.parametrize("name", MODELS)
def test_record_sizes_are_transformers(name):
    psi, largest = _meta_sizes(name)
    rec = hf_config.read(CONFIGS / f"{name}.json")
    assert total(rec) == psi
    assert F.record_sizes(rec)["largest_layer"] == largest


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("gpus", (8, 16))
def test_deepspeed_terms_are_its_estimator(name, gpus):
    """ZeRO-2 and ZeRO-3, with and without offload: the ledger plus the
    named terms is DeepSpeed's own figure (GPU and host of a node), to
    within DeepSpeed's int() rounding."""
    z2, z3 = _estimators()
    rec = hf_config.read(CONFIGS / f"{name}.json")
    psi, big = total(rec), F.record_sizes(rec)["largest_layer"]
    nodes = gpus // 8
    for off in (False, True):
        cpu, gpu = z2.estimate_zero2_model_states_mem_needs(
            psi, 8, nodes, cpu_offload=off)
        d = F.deepspeed_terms(2, psi, big, 8, nodes, off)
        assert sum(d["gpu"].values()) == pytest.approx(gpu, rel=1e-6)
        assert sum(d["cpu"].values()) == pytest.approx(cpu, rel=1e-6)
    for off, off_p in ((False, False), (True, False), (True, True)):
        cpu, gpu, _ = z3.estimate_zero3_model_states_mem_needs(
            psi, big, 8, nodes, cpu_offload=off, cpu_offload_params=off_p)
        d = F.deepspeed_terms(3, psi, big, 8, nodes, off, off_p)
        assert sum(d["gpu"].values()) == pytest.approx(gpu, rel=1e-6)
        assert sum(d["cpu"].values()) == pytest.approx(cpu, rel=1e-6)


def test_defaults_are_the_installed_deepspeeds():
    pytest.importorskip("deepspeed")
    from labkit.measure.zero.estimators import deepspeed_defaults
    ds = deepspeed_defaults()
    for k, v in F.DEEPSPEED_DEFAULTS.items():
        assert ds[k] == v, k


def _memory(*argv):
    r = subprocess.run([sys.executable, "-m", "labkit", "memory", *argv],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    return r


@pytest.mark.parametrize("stage", (2, 3))
def test_cli_within_one_percent_of_deepspeed(stage):
    """``memory --framework deepspeed``: ledger + the estimator's terms on
    the GPU agree with DeepSpeed's estimate (the bucket and the floor are
    what the estimator leaves out, listed apart)."""
    z2, z3 = _estimators()
    cfg = CONFIGS / "llama3-8b.json"
    r = _memory("--hf-config", str(cfg), "--gpus", "8", "--stage",
                str(stage), "--framework", "deepspeed", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    psi, big = _meta_sizes("llama3-8b")
    if stage == 2:
        _, gpu = z2.estimate_zero2_model_states_mem_needs(
            psi, 8, 1, cpu_offload=False)
    else:
        _, gpu, _ = z3.estimate_zero3_model_states_mem_needs(
            psi, big, 8, 1, cpu_offload=False, cpu_offload_params=False)
    estimator_terms = ("fp32 grads", "largest layer")
    ours = out["ledger"]["gpu_total"] + sum(
        t["gpu"] for t in out["framework"]
        if t["name"] in estimator_terms)
    assert abs(ours / gpu - 1) <= 0.01
    names = {t["name"] for t in out["framework"]}
    assert "reduce bucket" in names
    assert out["verdict"]["gpu_total"] > ours   # bucket and floor on top


def test_host_memory_decides_offload():
    """Qwen3-235B-A22B with its optimizer on the host of one 8-GPU node
    needs 14 bytes x 235 B parameters = 3.3 TB: the GPUs fit, the 2 TB
    host does not, and the verdict says so."""
    cfg = ROOT / "tests" / "data" / "hf_configs_moe" / "qwen3-235b-a22b.json"
    r = _memory("--hf-config", str(cfg), "--gpus", "8", "--stage", "3",
                "--offload", "optimizer")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert any(x.startswith("does not fit: the host needs 3291 GB")
               for x in lines)
    # with the floor and the host, 13 GPUs (2 nodes) carry it
    assert lines[-1].startswith("fewest GPUs that fit with the floor: 13")
    r = _memory("--hf-config", str(cfg), "--gpus", "8", "--stage", "3",
                "--offload", "optimizer", "--host-mem", "4096")
    assert r.stdout.splitlines()[-1].startswith("fits with")


def test_fsdp_terms_follow_the_unit():
    rec = hf_config.read(CONFIGS / "llama3-8b.json")
    sizes = F.record_sizes(rec)
    assert sizes["largest_unit"] == 128256 * 4096      # the embedding
    t = {x.name: x.gpu for x in F.terms(
        "fsdp2", ledger_strategy="zero3", params=total(rec), gpus=8,
        **sizes)}
    assert t["unsharded unit"] == t["prefetched unit"] == 2 * 128256 * 4096
    assert t["unit gradient, fp32 reduce_dtype"] == 4 * 128256 * 4096
    assert F.terms("ledger", ledger_strategy="zero3", params=1e9,
                   gpus=8) == []


def test_megatron_keeps_fp32_main_grads():
    (t,) = F.terms("megatron", ledger_strategy="zero1", params=1e9, gpus=8)
    assert t.gpu == 2e9      # 4 bytes of main_grad where the ledger has 2
    with pytest.raises(ValueError, match="megatron"):
        F.terms("megatron", ledger_strategy="zero3", params=1e9, gpus=8)
    with pytest.raises(ValueError, match="--framework"):
        F.terms("colossal", ledger_strategy="zero3", params=1e9, gpus=8)


def test_needs_the_layers_in_one_line():
    r = _memory("--params", "7e9", "--gpus", "8", "--stage", "3",
                "--framework", "fsdp2")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "--hf-config" in r.stderr
