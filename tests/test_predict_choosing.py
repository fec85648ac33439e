"""The layout planner against published training configurations.

The rule every published layout must pass, with the planner's default
assumptions (matmuls at 50% of the dense peak, links at 80%):
- it is feasible on A100-80GB with the paper's recomputation;
- it is near the top: its predicted step time is within ``NEAR_TOP`` of the
  best layout the planner finds under the same recomputation;
- its predicted throughput is within ``BAND`` of what the paper achieved.
"""
import json
import subprocess
import sys

import pytest

from labkit.predict.choosing import (GPUS, ArchModel, Assumptions, Cluster,
                                     Model, plan, standard_model)
from labkit.predict.choosing.layout_cost import stage_memory
from labkit.predict.memory import ledger
from labkit.predict.pipeline_parallel.partition import partition

V, S = 51200, 2048
NEAR_TOP = 1.25   # predicted step time / best predicted step time
BAND = (0.75, 1.25)  # predicted / achieved throughput

# Narayanan et al. 2021 (SC'21), Table 1: billions, heads, hidden, layers,
# TP, PP, GPUs, batch, achieved TFLOP/s per GPU (hardware FLOPs, full
# recomputation, A100-80GB on Selene).
TABLE1 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
]
# Smith et al. 2022 ("Using DeepSpeed and Megatron to Train Megatron-Turing
# NLG 530B"), Sec. 3 and Table 1: 105 layers, hidden 20480, 128 heads,
# TP 8 x PP 35, micro-batch 1, batch 1920, full recomputation, on 280 / 350
# / 420 DGX A100 nodes: 126 / 121 / 113 TFLOP/s per GPU.
MTNLG = [(280, 126), (350, 121), (420, 113)]
# Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
# Transformer Models"), Table 3 (configurations: heads, hidden, layers, TP,
# PP, GPUs, batch) and Table 5 (MFU with sequence parallelism and
# selective recomputation).
KORTHIKANTI = [
    (22, 64, 6144, 48, 8, 1, 8, 4, 0.415),
    (175, 96, 12288, 96, 8, 8, 64, 64, 0.514),
    (530, 128, 20480, 105, 8, 35, 280, 280, 0.560),
    (1000, 160, 25600, 128, 8, 64, 512, 512, 0.563),
]


def _published(model, batch, gpus, recompute, tp, pp, sp=False,
               micro_batch=None):
    """The published layout (best micro-batch) and the best overall."""
    lays = plan(model, batch, Cluster(gpus, 8, "a100-80gb"),
                recompute=(recompute,), sequence_parallel=(False, True))
    ok = [x for x in lays if x.feasible]
    mine = [x for x in ok if (x.tp, x.pp, x.sequence_parallel) == (tp, pp, sp)
            and micro_batch in (None, x.micro_batch)]
    assert mine, f"tp{tp} pp{pp} does not fit"
    return min(mine, key=lambda x: x.step_s), ok[0]


@pytest.mark.parametrize("row", TABLE1, ids=lambda r: f"{r[0]}B")
def test_narayanan_table1(row):
    _, heads, h, layers, t, p, gpus, batch, tflops = row
    mine, best = _published(Model(layers, h, heads, S, V), batch, gpus,
                            "full", t, p)
    assert mine.dp * t * p == gpus
    assert mine.step_s <= NEAR_TOP * best.step_s
    assert BAND[0] <= mine.hw_tflops_per_gpu / tflops <= BAND[1]


@pytest.mark.parametrize("nodes,tflops", MTNLG)
def test_megatron_turing_nlg(nodes, tflops):
    mine, best = _published(Model(105, 20480, 128, S, V), 1920, nodes * 8,
                            "full", 8, 35, micro_batch=1)
    assert mine.step_s <= NEAR_TOP * best.step_s
    assert BAND[0] <= mine.hw_tflops_per_gpu / tflops <= BAND[1]


@pytest.mark.parametrize("row", KORTHIKANTI, ids=lambda r: f"{r[0]}B")
def test_korthikanti_sequence_parallel(row):
    _, heads, h, layers, t, p, gpus, batch, mfu = row
    mine, best = _published(Model(layers, h, heads, S, V), batch, gpus,
                            "selective", t, p, sp=True)
    assert mine.step_s <= NEAR_TOP * best.step_s
    assert BAND[0] <= mine.mfu / mfu <= BAND[1]


def test_memory_is_the_ledger_plus_activations():
    m = Model(4, 256, 8, 128, 1000)
    lay = plan(m, 8, Cluster(4, 4, "a100-40gb"), tp=1, pp=1,
               micro_batch=2, recompute=("none",), zero=(3,),
               sequence_parallel=(False,))[0]
    psi = 4 * (12 * 256 ** 2 + 13 * 256) + (1000 + 128) * 256
    led = ledger(psi, 4, "zero3")
    assert lay.memory["params"] == led.params_gpu
    assert lay.memory["optimizer"] == led.optimizer_gpu
    assert lay.memory["total"] == pytest.approx(sum(
        v for k, v in lay.memory.items() if k not in ("total", "cpu")))
    # Korthikanti Table 2, no parallelism: s b h (34 + 5 a s / h) per layer
    s, b, h, a = 128, 2, 256, 8
    assert lay.memory["activations"] == 4 * s * b * h * (34 + 5 * a * s / h)


def test_ranked_and_offload_uses_host_memory():
    m = standard_model(70e9)
    lays = plan(m, 64, Cluster(8, 8, "a100-80gb"),
                offload=("none", "optimizer", "params"))
    ok = [x for x in lays if x.feasible]
    assert [x.step_s for x in ok] == sorted(x.step_s for x in ok)
    off = [x for x in ok if x.offload != "none"]
    assert all(x.host_memory_per_node > 0 for x in off)
    assert all(x.time["offload"] > 0 for x in off)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "labkit", "plan", *args],
                          capture_output=True, text=True)


def test_cli_json():
    r = _cli("--params", "13e9", "--gpus", "8", "--gpu", "a100-80gb",
             "--batch", "32", "--top", "3", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["feasible"] > 0 and len(d["layouts"]) == 3
    steps = [x["step_s"] for x in d["layouts"]]
    assert steps == sorted(steps)


@pytest.mark.parametrize("args", [
    ("--params", "13e9", "--gpus", "8", "--batch", "32", "--tp", "3"),
    ("--params", "13e9", "--gpus", "8", "--batch", "32", "--pp", "3"),
    ("--params", "13e9", "--gpus", "8", "--batch", "30", "--tp", "2",
     "--pp", "1"),
    ("--params", "13e9", "--gpus", "0", "--batch", "32"),
    ("--params", "-5", "--gpus", "8", "--batch", "32"),
    ("--params", "13e9", "--gpus", "8", "--batch", "32", "--gpu", "tpu"),
    ("--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "8",
     "--vocab", "8", "--batch", "0", "--gpus", "1"),
])
def test_cli_bad_input_is_one_line_exit_2(args):
    r = _cli(*args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_cli_nothing_fits_says_what_is_short():
    r = _cli("--params", "175e9", "--gpus", "8", "--gpu", "a100-40gb",
             "--batch", "8")
    assert r.returncode == 1
    assert "GB more than the 40 GB" in r.stderr


def test_presets_cite_sources():
    assert all(g.source and g.memory > 0 for g in GPUS.values())
    assert Assumptions().efficiency == 0.5


# -- real layouts: pipelines that do not divide evenly, embedding and head on
# the stages that hold them (labkit.predict.pipeline_parallel.partition) ----------------------

# Published layouts the planner must accept with their own TP x PP:
# (name, layers, hidden, heads, seq, vocab, batch, GPUs, GPU, TP, PP).
PUBLISHED = [
    # Le Scao et al. 2022 (BLOOM, arXiv:2211.05100), Sec. 3.4 and the
    # bigscience/bloom model card: 70 layers, hidden 14336, 112 heads,
    # vocabulary padded to 250880, 2048 sequences of 2048; 48 nodes of 8
    # A100-80GB, TP 4 x PP 12 x DP 8 (70 layers on 12 stages).
    ("bloom-176b", 70, 14336, 112, 2048, 250880, 2048, 384, "a100-80gb",
     4, 12),
    # Dubey et al. 2024 (The Llama 3 Herd of Models), Tables 3 and 4 and
    # Sec. 3.3.2: 126 layers, width 16384, 128 heads, vocabulary 128000;
    # 8192 H100-80GB, TP 8 x CP 1 x PP 16 x DP 64, sequence 8192, 16M
    # tokens per batch (2048 sequences), one layer fewer on the first and
    # last stages. (The GPT shape, MHA + 4h MLP: 408 B; the real
    # architecture: test_llama3_405b_published_layout_with_its_real_...)
    ("llama3-405b", 126, 16384, 128, 8192, 128000, 2048, 8192, "h100-80gb",
     8, 16),
    # Zhang et al. 2022 (OPT, arXiv:2205.01068), Table 1 and Sec. 2.4:
    # 96 layers, 96 heads, hidden 12288, ~2M-token batches on 992
    # A100-80GB with FSDP and Megatron TP 8 (no pipeline); 992 sequences
    # of 2048 = 2.03M tokens, 8 per data-parallel group of 124.
    ("opt-175b", 96, 12288, 96, 2048, 50272, 992, 992, "a100-80gb", 8, 1),
    # Black et al. 2022 (GPT-NeoX-20B, arXiv:2204.06745) and its model
    # card: 44 layers, 6144 wide, 64 heads, vocabulary padded to 50432,
    # 96 A100-40GB (12 nodes), TP 2 x PP 4; batch "1538" contexts, i.e.
    # micro-batch 4 x 32 accumulation x DP 12 = 1536 in its 20B config.
    ("gpt-neox-20b", 44, 6144, 64, 2048, 50432, 1536, 96, "a100-40gb", 2, 4),
]


@pytest.mark.parametrize("row", PUBLISHED, ids=lambda r: r[0])
def test_published_layouts_are_feasible(row):
    _, layers, h, heads, s, v, batch, gpus, gpu, t, p = row
    lays = plan(Model(layers, h, heads, s, v), batch, Cluster(gpus, 8, gpu),
                tp=t, pp=p)
    ok = [x for x in lays if x.feasible]
    assert ok, lays[0].reason
    assert all((x.tp, x.pp, x.dp * t * p) == (t, p, gpus) for x in ok)
    assert all(sum(x.partition) == layers and len(x.partition) == p
               for x in ok)


def test_bloom_command_line_lists_a_feasible_layout():
    r = _cli("--layers", "70", "--hidden", "14336", "--heads", "112",
             "--seq", "2048", "--vocab", "250880", "--batch", "2048",
             "--gpus", "384", "--gpus-per-node", "8", "--gpu", "a100-80gb",
             "--recompute", "full", "--tp", "4", "--pp", "12", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["feasible"] > 0
    best = d["layouts"][0]
    assert (best["tp"], best["pp"], best["dp"]) == (4, 12, 8)
    assert best["partition"] == [5] + [6] * 10 + [5]


def test_partition_rule():
    # the short stages are taken from the ends inward
    assert partition(70, 12) == (5,) + (6,) * 10 + (5,)      # BLOOM
    assert partition(126, 16) == (7,) + (8,) * 14 + (7,)     # Llama 3 405B
    assert partition(48, 2) == (24, 24)
    assert partition(10, 4) == (2, 3, 3, 2)
    assert partition(9, 4) == (2, 2, 3, 2)
    assert partition(7, 1) == (7,)
    # Megatron-LM's first/last-stage layers: the rest shared by the rule
    parts = partition(70, 12, first=4, last=4)
    assert parts[0] == parts[-1] == 4 and sum(parts) == 70
    assert max(parts[1:-1]) - min(parts[1:-1]) <= 1
    with pytest.raises(ValueError):
        partition(4, 5)


def test_heaviest_stage_sets_memory_and_slowest_sets_time():
    m = Model(10, 1024, 16, 1024, 50000)
    c = Cluster(4, 4, "a100-80gb")
    kw = dict(tp=1, pp=4, micro_batch=1, recompute=("none",), zero=(0,),
              sequence_parallel=(False,))
    even_ish = plan(m, 8, c, **kw)[0]
    assert even_ish.partition == (2, 3, 3, 2)
    per = [stage_memory(m, even_ish, Assumptions(), i) for i in range(4)]
    assert even_ish.memory == max(per, key=lambda x: x["total"])
    assert per[0]["params"] > per[3]["params"] - 1  # embedding on stage 0
    assert per[3]["logits"] > 0 and per[0]["logits"] == 0
    # a partition list: the heavier stage paces the pipeline
    lop = plan(m, 8, c, partition=(1, 1, 1, 7), **kw)[0]
    assert lop.partition == (1, 1, 1, 7) and lop.stage == 3
    assert lop.time["compute"] == pytest.approx(
        even_ish.time["compute"] * 7 / 3)


@pytest.mark.parametrize("args", [
    ("--partition", "5,6,x"), ("--partition", "1,1,1"), ("--pp", "3",
     "--partition", "20,20"), ("--pp", "40"),
    ("--first-stage-layers", "2"),
    ("--pp", "4", "--first-stage-layers", "39"),
])
def test_cli_bad_partition_is_one_line_exit_2(args):
    r = _cli("--params", "13e9", "--gpus", "8", "--batch", "32", *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_context_parallel_makes_llama3_long_context_fit():
    # Dubey et al. 2024, Table 4: the long-context stage of Llama 3 405B,
    # 16384 H100, TP 8 x CP 16 x PP 16 x DP 8, sequence 131072, 16M tokens
    # per batch (128 sequences)
    m = Model(126, 16384, 128, 131072, 128000)
    c = Cluster(16384, 8, "h100-80gb")
    with_cp = [x for x in plan(m, 128, c, tp=8, pp=16,
                               context_parallel=(16,)) if x.feasible]
    assert with_cp and all(x.cp == 16 and x.dp == 8 for x in with_cp)
    without = plan(m, 128, c, tp=8, pp=16)
    assert not any(x.feasible for x in without)
    # activations per rank: the sequence divided by cp
    lay = with_cp[0]
    assert lay.time["cp_exposed"] >= 0 and "cp16" in lay.name()


def test_cli_cp():
    r = _cli("--params", "13e9", "--gpus", "16", "--batch", "32", "--cp",
             "2", "--top", "2", "--json")
    assert r.returncode == 0, r.stderr
    assert all(x["cp"] == 2 for x in json.loads(r.stdout)["layouts"])
    bad = _cli("--params", "13e9", "--gpus", "16", "--batch", "32", "--cp",
               "3")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


# -- the real architecture: Llama 3.1 405B from its config.json (GQA with 8
# KV heads, SwiGLU of width 53248, an untied 128256 vocabulary) -----------

HF = "tests/data/hf_configs/llama3.1-405b.json"


@pytest.mark.parametrize("gpus,dp", [(8192, 64), (16384, 128)])
def test_llama3_405b_published_layout_with_its_real_architecture(gpus, dp):
    # Dubey et al. 2024, Table 4: TP 8 x CP 1 x PP 16 x DP 64 / 128 on
    # 8,192 / 16,384 H100, sequence 8192, 16M tokens (2048 sequences)
    from labkit.predict.model import arch as A
    m = ArchModel(A.from_hf_config(HF), 8192)
    assert m.params == 405_853_388_800
    lays = plan(m, 2048, Cluster(gpus, 8, "h100-80gb"), tp=8, pp=16)
    ok = [x for x in lays if x.feasible]
    assert ok, lays[0].reason
    assert all((x.tp, x.pp, x.dp) == (8, 16, dp) for x in ok)
    assert all(x.partition == partition(126, 16) for x in ok)
    # the last stage holds the untied 128K head and its logits
    x = ok[0]
    last = stage_memory(m, x, Assumptions(), 15)
    first = stage_memory(m, x, Assumptions(), 0)
    assert last["logits"] > 0 and first["logits"] == 0
    assert last["params"] > first["params"]      # + the final RMSNorm


def test_llama3_405b_long_context_with_its_real_architecture():
    from labkit.predict.model import arch as A
    m = ArchModel(A.from_hf_config(HF), 131072)
    c = Cluster(16384, 8, "h100-80gb")
    ok = [x for x in plan(m, 128, c, tp=8, pp=16, context_parallel=(16,))
          if x.feasible]
    assert ok and all((x.cp, x.dp) == (16, 8) for x in ok)
    assert not any(x.feasible for x in plan(m, 128, c, tp=8, pp=16))


def test_gpt_record_prices_as_the_gpt_shape():
    # the planner reads the record; a GPT's record gives the same bytes
    m = Model(10, 1024, 16, 1024, 50000)
    r = ArchModel(m.arch, m.seq)
    c = Cluster(8, 8, "a100-80gb")
    for x, y in zip(plan(m, 16, c), plan(r, 16, c)):
        assert x.name() == y.name() and x.memory == y.memory
        assert x.step_s == pytest.approx(y.step_s, rel=1e-12)
        assert x.mfu == pytest.approx(y.mfu, rel=1e-12)


def test_cli_hf_config_dense_json():
    r = _cli("--hf-config", HF, "--seq", "8192", "--gpus", "16384",
             "--gpu", "h100-80gb", "--batch", "2048", "--tp", "8", "--pp",
             "16", "--top", "3", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["params"] == 405_853_388_800
    assert d["model"]["arch"]["kv_heads"] == 8 and d["model"]["seq"] == 8192
    assert all((x["tp"], x["pp"], x["dp"]) == (8, 16, 128)
               for x in d["layouts"])
    # every stage's bytes: the heaviest is the layout's memory; the
    # stages' parameters are the layers, the embedding and the 128K head
    from labkit.predict.model import arch as A
    from labkit.predict.pipeline_parallel import stage_bytes as SB
    rec = A.from_hf_config(HF)
    for x in d["layouts"]:
        st = x["stages"]
        assert [s["stage"] for s in st] == list(range(16))
        assert [s["layers"] for s in st] == list(x["partition"])
        assert st[x["stage"]]["total"] == x["memory"]["total"]
        assert max(s["total"] for s in st) == x["memory"]["total"]
        assert sum(s["param_count"] for s in st) == pytest.approx(
            126 * SB.layer_params(rec, 8) + SB.embedding_params(rec, 8)
            + SB.head_params(rec, 8))
        assert st[-1]["logits"] > 0 and st[0]["logits"] == 0
    p = _cli("--preset", "llama3-8b", "--seq", "8192", "--gpus", "8",
             "--gpu", "h100-80gb", "--batch", "64", "--top", "1")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("llama3-8b: 8.0 B parameters")


@pytest.mark.parametrize("args", [
    ("--hf-config", HF, "--layers", "4"),
    ("--hf-config", HF, "--params", "70e9"),
    ("--hf-config", HF, "--preset", "llama3-8b"),
    ("--preset", "nope"),
    ("--preset", "llama3-8b", "--ep", "2"),
    ("--hf-config", "tests/data/hf_configs/missing.json"),
    ("--preset", "llama3-8b", "--tp", "3"),
    ("--preset", "llama3-8b", "--seq", "0"),
    ("--preset", "gpt-tiny", "--seq", "64"),     # 32 learned positions
])
def test_cli_hf_config_bad_input_is_one_line_exit_2(args):
    r = _cli(*args, "--gpus", "8", "--batch", "8")
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_cli_tp_that_cannot_place_the_kv_heads_names_them():
    r = _cli("--hf-config", "tests/data/hf_configs/qwen2-0.5b.json",
             "--gpus", "7", "--gpus-per-node", "7", "--batch", "7", "--tp",
             "7")
    assert r.returncode == 2 and "2 KV heads" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
