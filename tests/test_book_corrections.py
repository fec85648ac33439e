"""The content corrections of issue 19 and the interview answers, read in
the built HTML (``make test`` builds it first and sets LABKIT_BOOK_BUILT=1;
skipped when no build is there and nobody asked for it).

Each correction is a pair: the wrong statement must be gone from the page
where it was (these patterns match the earlier text: the test fails on
it) and the corrected one must be there. Numbers come from labkit, as the
chapters glue them. LABKIT_BOOK_HTML points the test at another build.
"""
import html
import os
import re
from pathlib import Path

import pytest

from labkit import checks
from labkit.predict.checkpoint import saved_bytes_per_param
from labkit.predict.experts import uniform_bytes
from labkit.predict.memory import GB, activation_bytes_model, ledger

ROOT = Path(__file__).resolve().parent.parent
HTML = Path(os.environ.get("LABKIT_BOOK_HTML", ROOT / "_build" / "html"))
_cache: dict = {}


def _built():
    if (HTML / "index.html").exists():
        return
    if os.environ.get("LABKIT_BOOK_BUILT"):
        pytest.fail("make test built the book, but _build/html is missing")
    pytest.skip("book not built: run `make book` or `make test`")


def raw(page: str) -> str:
    _built()
    if page not in _cache:
        _cache[page] = (HTML / "book" / f"{page}.html").read_text()
    return _cache[page]


def text(page: str) -> str:
    """The page's text: no tags, no math delimiters, one space."""
    t = re.sub(r"<(script|style)\b.*?</\1>", " ", raw(page), flags=re.S)
    t = html.unescape(re.sub(r"<[^>]+>", " ", t))
    t = t.replace("\\(", "").replace("\\)", "").replace("\u2013", "--")
    return " ".join(t.split()).replace(" ,", ",").replace(" .", ".")


L, S, H, A = 80, 4096, 8192, 64          # chapter 1's 70B-class shape
FLASH = activation_bytes_model(L, S, 1, H, A) / GB
PAPER_LAYER = activation_bytes_model(1, S, 1, H, A,
                                     fused_attention=False) / GB

# (page, what was wrong, what holds now)
CORRECTIONS = {
    "1 70B activations, headline": (
        "01_memory", rf"that is {PAPER_LAYER:.1f} GB per layer",
        rf"{FLASH:.0f} GB for the model with fused attention"),
    "1 70B activations, offload solution": (
        "01_memory", r"sequence are \d+ GB without recomputation",
        r"they do not fit in what is left, so the run needs activation "
        r"checkpointing"),
    "2 per step whatever the micro-batches (chapter 3)": (
        "03_sharding", r"fixed 2\\Phi or 3\\Phi per step",
        r"2\\Phi or 3\\Phi per forward-backward pass"),
    "2 FSDP gathers every micro-batch (chapter 3)": (
        "03_sharding", r"dividing the traffic per sample by k\. Under",
        r"set_requires_gradient_sync\(False\)"),
    "2 no_sync as a fix (chapter 7)": (
        "07_profiling", r"where memory allows \(chapter 3\), and gradient "
        r"accumulation with model\.no_sync\(\)",
        r"for DDP only, gradient accumulation with model\.no_sync\(\)"),
    "2 no_sync in the rules table (chapter 7)": (
        "07_profiling",
        r"reshard_after_forward, no_sync accumulation(?! \(DDP only\))",
        r"no_sync accumulation \(DDP only\)"),
    "3 HYBRID_SHARD is MiCS-like (chapter 3)": (
        "03_sharding", r"ZeRO\+\+ hpZ-like / MiCS",
        r"HYBRID_SHARD 2-D mesh \(replicate, shard\) MiCS-like"),
    "3 chapter 4 agrees": (
        "04_zero", r"HYBRID_SHARD[^|]{0,40}hpZ",
        r"stage: 3 \+ MiCS HYBRID_SHARD"),
    "4 NVLS inside an NVLink domain": (
        "02_collectives", r"across nodes, NVLink SHARP and CollNet",
        r"NVLink SHARP \(NVLS\) inside one NVLink domain .{0,120}across "
        r"nodes CollNet over InfiniBand SHARP"),
    "5 1F1B warm-up": (
        "06_pipeline_parallel", r"warm-up of p-i forwards",
        r"warm-up of p-r-1 forwards"),
    "6 one symbol for the bubble": (
        "06_pipeline_parallel", r"idles b/\(1\+b\)",
        r"idles \\frac\{p-1\}\{m\+p-1\}"),
    "6 one symbol for prefetch_factor": (
        "07_profiling", r"prefetch_factor p \(default 2\)",
        r"prefetch_factor \(default 2; no symbol here"),
}


# issue 29, "What an expert would correct": items 1-3 and 5-12 (item 4,
# chapter 11's context-parallel table, is tested with that chapter)
Q = "['\u2019]"                         # an apostrophe, straight or curly
OFF = ledger(70e9, 8, "zero3", offload="optimizer")
OFF_DS = ledger(70e9, 8, "zero3", offload="optimizer", fp32_grads=True)
FSDP_B = int(sum(saved_bytes_per_param(engine="fsdp")))
DS_B = int(sum(saved_bytes_per_param(engine="deepspeed")))
CORRECTIONS.update({
    "29.1 TP overlap (chapter 2)": (
        "02_collectives", r"and nothing can run while it waits",
        r"allreduce_dgrad, async_op=True in megatron/core/tensor_parallel/"
        r"layers\.py"),
    "29.1 TP overlap (chapter 5)": (
        "05_tensor_parallel",
        r"as long as the computation itself\. The ratio is",
        r"tp_comm_overlap \(model_parallel_config\.py\)"),
    "29.1 TP overlap (chapter 6's answer)": (
        "06_pipeline_parallel", r"all-reduces cannot overlap",
        r"TP splits each layer inside a node, where NVLink carries its "
        r"per-layer all-reduces"),
    "29.1 TP overlap (chapter 10)": (
        "10_mesh", rf"TP{Q}s collectives block every layer",
        rf"TP{Q}s forward collectives sit between a layer{Q}s GEMMs, "
        r"exposed unless overlapped"),
    "29.1 TP overlap (chapter 13's table)": (
        "15_choosing", r"per layer cannot overlap",
        rf"PyTorch{Q}s async TP\) hides at most the compute"),
    "29.2 the layout exercise names its GPUs": (
        "06_pipeline_parallel", r"GPT-3 on 8 GPUs of 80 GB",
        r"GPT-3 on nodes of 8 GPUs of 80 GB"),
    "29.2 the tie goes to the largest TP": (
        "06_pipeline_parallel", r"is TP = 1 x PP = 96",
        r"take the largest TP, TP = 8 x PP = 12"),
    "29.3 175B: a pipeline or sharded states": (
        "06_pipeline_parallel", r"Why 175B needs TP and PP together",
        r"OPT-175B was trained with FSDP and Megatron TP 8 and no pipeline"),
    "29.3 the answer box agrees": (
        "06_pipeline_parallel", r"why must 175B combine TP and PP",
        r"TP 8 \+ FSDP, as OPT-175B trained without a pipeline"),
    "29.5 ZeRO-Infinity on one GPU (chapter 4)": (
        "04_zero", r"ZeRO-3 alone on one GPU has nothing to partition",
        r"\(ZeRO-Infinity, Rajbhandari et al\. 2021\) is DeepSpeed"
        rf"{Q}s documented single-GPU recipe"),
    "29.5 ZeRO-Infinity on one GPU (chapter 13)": (
        "15_choosing", r"With one GPU there is nothing to shard",
        r"ZeRO-3 with parameter and optimizer offload \(ZeRO-Infinity\)"),
    "29.6 FSDP2 can skip the all-gathers (chapter 3)": (
        "03_sharding",
        r"with gradient accumulation FSDP gathers again every micro-batch\.",
        r"FSDP2 can skip the all-gathers too.{0,40}"
        r"set_reshard_after_backward\(False\)"),
    "29.6 FSDP2 can skip the all-gathers (chapter 7)": (
        "07_profiling", r"It is no fix under FSDP / ZeRO-3",
        r"FSDP2 can skip the all-gathers as well -- "
        r"set_reshard_after_backward\(False\)"),
    "29.6 FSDP2 can skip the all-gathers (chapter 13)": (
        "15_choosing",
        r"all-gathers the parameters every micro-batch \(and",
        r"FSDP2 skips them with set_reshard_after_backward\(False\) \+ "
        r"set_reshard_after_forward\(False\) \+ "
        r"set_requires_gradient_sync\(False\)"),
    "29.7 FSDP checkpoints: the row split": (
        "08_checkpoint", r"ZeRO-3 / FSDP sharded",
        rf"ZeRO-3 sharded \(DeepSpeed, {DS_B} B/param\).{{0,40}}"
        rf"FSDP sharded \({FSDP_B} B/param\)"),
    "29.7 FSDP checkpoints: the exercise": (
        "08_checkpoint", r"why is it not 16\\Psi/N\?",
        rf"it writes 4 \+ 8 = {FSDP_B}\\Psi/N"),
    "29.8 two meanings of selective (chapter 5)": (
        "05_tensor_parallel", r"which has the same effect on that term",
        rf"Korthikanti et al\.{Q}s sense.{{0,400}}it is a no-op.{{0,200}}"
        rf"torchtitan{Q}s op-level"),
    "29.8 two meanings of selective (chapter 12)": (
        "12_fit", r"with selective recomputation \(keep the matmul",
        rf"here the course{Q}s save-matmuls policy"),
    "29.9 Megatron-Core 0.16 (chapter 6)": (
        "06_pipeline_parallel",
        r"another TP/PP layout\. Megatron-LM: the training",
        r"Megatron-FSDP \(use_megatron_fsdp, data_parallel_sharding_strategy"
        r" = optim / optim_grads / optim_grads_params"),
    "29.9 Megatron-Core 0.16 (chapter 13)": (
        "15_choosing", r"\(activation recomputation, not offload\)",
        r"optimizer and activation CPU offload \(optimizer_cpu_offload"),
    "29.10 DeepCompile and AutoTP (chapter 4)": (
        "04_zero", r"composes with torch\.compile and tensor parallelism",
        r"DeepSpeed 0\.19 has DeepCompile \(deepspeed/compile/\) and AutoTP"
        r" training"),
    "29.10 the comparison table agrees": (
        "04_zero", r"Composes with torch\.compile, DTensor",
        r"through its engine: DeepCompile"),
    "29.11 ZeroRedundancyOptimizer (chapter 3)": (
        "03_sharding", r"-- -- stage 1 optimizer states",
        r"DDP \+ torch\.distributed\.optim\.ZeroRedundancyOptimizer"),
    "29.11 ZeroRedundancyOptimizer (chapter 4)": (
        "04_zero", r"no ZeRO-1/2 proper",
        r"ZeRO-1 for DDP is torch\.distributed\.optim\."
        r"ZeroRedundancyOptimizer"),
    # two of the caveats, checked the same way
    "29.c ring CP's bytes per rank are nearly constant in p": (
        "11_context_parallel", rf"Ring{Q}s volume grows with p",
        rf"Ring{Q}s volume per rank is nearly constant in p.{{0,200}}"
        r"sends \(3p-2\)/p times the K/V of the whole sequence"),
    "29.c NVLS: on by default where supported, the tuner picks": (
        "02_collectives", rf"NVLS is NCCL{Q}s default all-reduce",
        r"NCCL enables NVLS by default wherever the hardware supports it"
        r".{0,200}its tuner picks, call by call, the algorithm it predicts "
        r"fastest"),
    "29.12 offload host RAM with fp32 CPU gradients": (
        "01_memory",
        rf"lives in host memory: {8 * OFF.cpu_total / GB:.0f} GB of CPU RAM",
        rf"{OFF_DS.cpu_total / GB:.1f} GB of host RAM: "
        rf"{8 * OFF_DS.cpu_total / GB:,.0f} GB per node before its pinned"),
})
for _k, (_p, _w, _r) in list(CORRECTIONS.items()):
    if _k.startswith("29."):   # code and glued numbers sit in their own
        CORRECTIONS[_k] = (_p, _w, _r.replace(r"\(", r"\( ?").replace(
            r"\)", r" ?\)"))  # tags: "( x )" in the text


# issue 50, "What an expert would still correct": nine errors, the
# iv-ledger box, the ZeRO-Offload citation and the caveats C1-C11 (C10 is
# the flops command's label: tests/test_predict_flops.py). A caveat that
# replaced no sentence has no wrong pattern (None). Each has its Chinese
# twin in ZH_CORRECTIONS, read in the Chinese edition.
EP_B = 2 * uniform_bytes(2, 4096 // 8, 4096, 8, 2)     # Mixtral, bf16
TP_B = 2 * 7 / 8 * 4096 * 4096 * 2
OFF50 = 8 * ledger(70e9, 8, "zero3", offload="optimizer",
                   fp32_grads=True).cpu_total / GB
OFFP50 = 8 * ledger(70e9, 8, "zero3", offload="params",
                    fp32_grads=True).cpu_total / GB
CORRECTIONS.update({
    "50.1 EP and TP at equal tokens": (
        "13_experts", r"EP does not win on bytes",
        rf"dispatch plus combine move {EP_B / 2**20:.0f} MiB per rank, "
        rf"{EP_B / TP_B:.2f} × TP{Q}s bytes: k/p"),
    "50.1 the exercise agrees": (
        "13_experts", r"EP moves 2\.0 × as much",
        rf"At equal tokens EP moves {EP_B / TP_B:.2f} × as much, k/p"),
    "50.2 the course's policy has its own name (chapter 12)": (
        "12_fit", r"selective policy recomputes no matmul",
        r"save-matmuls policy recomputes no matmul, torchtitan"
        rf"{Q}s op-level one half of them"),
    "50.2 torchtitan's policy beside it (chapter 5)": (
        "05_tensor_parallel",
        r"op-level selective activation checkpointing \(a list",
        r"torchtitan{Q}s op-level policy saves matmuls and attention "
        r"except every second matmul".replace("{Q}", Q)),
    "50.3 Ulysses is limited by the query heads": (
        "11_context_parallel",
        r"so it cannot use more ranks than KV heads|no more KV heads to "
        r"hand out|needs p \\le the number of \(KV\) heads",
        r"UlyssesSPAttentionHF.{0,120}replicates the KV heads.{0,160}the "
        r"query heads are the limit"),
    "50.4 DeepSeek-V3 keeps BF16 moments": (
        "14_precision",
        rf"Assuming a recipe like DeepSeek-V3{Q}s|because FP8 recipes keep",
        r"DeepSeek-V3 in BF16 \(Sec\. 3\.3\.3\)"),
    "50.4 the 30-second answer agrees": (
        "14_precision", r"optimizer states, norms, attention and reductions"
        r" are unchanged", rf"Assuming torchao{Q}s recipe"),
    "50.5 host RAM under ZeRO-3 offload": (
        "04_zero", r"moves 980 GB into|needs 1,120 GB of host RAM",
        rf"moves {OFF50:,.0f} GB into the node{Q}s host memory.{{0,400}}"
        rf"needs {OFFP50:,.0f} GB of host RAM per node.{{0,200}}"
        r"estimate_zero3_model_states_mem_needs"),
    "50.6 experts shard over their replicas": (
        "13_experts", r"Experts also do not shard like FSDP",
        r"fully_shard\(transformer_block\.moe\.experts, "
        r"mesh=dp_mod_ep_mesh\)"),
    "50.7 DeepSeek-V3's routed scaling": (
        "13_experts", r"sum to one in Mixtral and DeepSeek-V3\) and",
        r"routed_scaling_factor, 2\.5"),
    "50.8 residual only when all k drop": (
        "13_experts", r"their token passes through the residual only",
        r"residual only when all k of its assignments are dropped"),
    "50.9 Switch's loss is alpha when even": (
        "13_experts", r"is 1 when the load is even",
        r"equals \\alpha when the load is even"),
    "50 iv-ledger: model states alone": (
        "01_memory", r"memory: below 5\.0 ?B parameters",
        r"model states alone cap it at 5\.0 ?B parameters on 80 GB"),
    "50 the ZeRO-Offload section": (
        "01_memory", r"Ren et al\. 2021, Sec\. 4\.1",
        r"Ren et al\. 2021, Sec\. 3, .Unique Optimal Offload Strategy."),
    "50.C1 DeepSeek-V3's own memory": (
        "13_experts", None,
        r"DualPipe keeps two copies of the model parameters "
        r"\(Sec\. 3\.2\.1\)"),
    "50.C2 fp32 accumulation is the recipe's": (
        "14_precision", r"take FP8 inputs and accumulate in fp32",
        r"keep only about 14 bits of the running sum.{0,120}every 128 "
        r"elements \(Sec\. 3\.3\.2\)"),
    "50.C3 torchao converts the head unless filtered": (
        "14_precision", None,
        rf"torchtitan{Q}s Float8 filter_fqns is empty by default"),
    "50.C4 collectives can be in the graph": (
        "14_precision", None,
        r"collectives can be in the graph\. SimpleFSDP"),
    "50.C5 one FLOP convention": (
        "13_experts", r"6 N_\\text\{active\} per token",
        r"embedding left out because a lookup multiplies nothing"),
    "50.C6 six all-to-alls with the MoE block recomputed": (
        "13_experts", r"Four all-to-alls of rows per layer per step",
        r"six when the MoE block is recomputed in backward"),
    "50.C7 MLA, derived and measured": (
        "13_experts", None,
        r"DeepSeek-V2, arXiv 2405\.04434.{0,1800}d_c \+ d_h\^R = 576 "
        r"values.{0,1200}ratio 1\.000"),
    "50.C8 BLOOM had no sequence parallelism": (
        "15_choosing", None,
        rf"which BLOOM{Q}s Megatron-DeepSpeed run did not use"),
    "50.C9 Llama 3 405B at 128K: at the limit": (
        "15_choosing", r"Table 4\) fits at 7",
        r"fits with it, at the limit: \d+\.\d GB per GPU of 80, the "
        rf"planner{Q}s 2 GB reserve included"),
    "50.C11 bytes that leave the rank": (
        "11_context_parallel", None,
        r"Both columns count bytes that leave the rank"),
})

ZH_CORRECTIONS = {
    "50.1": ("13_experts", r"EP 在字节数上并不占优",
             rf"是 TP 的 {EP_B / TP_B:.2f} ×：即 k/p"),
    "50.1 exercise": ("13_experts", r"在 k = 2 时 EP 的传输量",
                      rf"在相同 token 数下，EP 的传输量是 TP 的 "
                      rf"{EP_B / TP_B:.2f} ×"),
    "50.2 chapter 12": ("12_fit", r"这里用的是 torchtitan 的算子级策略",
                        r"save-matmuls 策略不重算任何 matmul，torchtitan "
                        r"的算子级策略重算其中一半"),
    "50.2 chapter 5": ("05_tensor_parallel",
                       r"torchtitan 的算子级选择性激活检查点",
                       r"每隔一个 matmul 重算一个"),
    "50.3": ("11_context_parallel",
             r"rank 数不能超过 KV 头数|已经没有更多 KV 头可分了",
             r"真正的上限是 query 头数"),
    "50.4": ("14_precision", r"假设采用类似 DeepSeek-V3 的方案",
             r"DeepSeek-V3 以 BF16 保存（第 3\.3\.3 节）"),
    "50.5": ("04_zero", r"主机内存；连参数也",
             rf"把 {OFF50:,.0f} GB 搬进节点的主机内存.{{0,300}}"
             rf"{OFFP50:,.0f} GB 主机内存"),
    "50.6": ("13_experts", r"不像 FSDP",
             r"fully_shard\(transformer_block\.moe\.experts, "
             r"mesh=dp_mod_ep_mesh\)"),
    "50.7": ("13_experts", None, r"routed_scaling_factor.{0,6}2\.5"),
    "50.8": ("13_experts", r"对应 token 只走残差|这些 token 只走残差",
             r"全部被丢弃时，它才只走残差连接"),
    "50.9": ("13_experts", r"在负载均匀时为 1",
             r"等于 \\alpha"),
    "50 iv-ledger": ("01_memory", r"参数量必须低于",
                     r"模型状态就把(参数量限制在|它卡在) 5\.0 ?B"),
    "50 ZeRO-Offload section": ("01_memory", r"2021，第 4\.1 节",
                                r"第 3 节“Unique Optimal Offload "
                                r"Strategy”"),
    "50.C1": ("13_experts", None, r"DualPipe 要保存两份模型参数"),
    "50.C2": ("14_precision", r"以 FP8 作为输入、在 fp32 中累加",
              r"只保留累加和的大约 14 位"),
    "50.C3": ("14_precision", None, r"filter_fqns 默认为空"),
    "50.C4": ("14_precision", None, r"集合通信也可以进入计算图"),
    "50.C5": ("13_experts", r"每个 token 6 N_\\text\{active\}",
              r"查表不做乘法"),
    "50.C6": ("13_experts", r"每层每步共四次", r"就是六次"),
    "50.C7": ("13_experts", None,
              r"多头潜在注意力.{0,2000}比值 1\.000"),
    "50.C8": ("15_choosing", None,
              r"BLOOM 的 Megatron-DeepSpeed 训练并没有用序列并行"),
    "50.C9": ("15_choosing", r"放得下；", r"刚好放得下"),
    "50.C11": ("11_context_parallel", None,
               r"两列统计的都是离开本 rank 的字节"),
}


def zh_text(page: str) -> str:
    """The Chinese page's text, as :func:`text` reads the English."""
    key = f"zh/{page}"
    if key not in _cache:
        path = HTML / "zh" / "book" / f"{page}.html"
        if not path.exists():
            if os.environ.get("LABKIT_ZH_BUILT"):
                pytest.fail("the Chinese edition should be built")
            pytest.skip("no Chinese build")
        _cache[key] = path.read_text()
    t = re.sub(r"<(script|style)\b.*?</\1>", " ", _cache[key], flags=re.S)
    t = html.unescape(re.sub(r"<[^>]+>", " ", t))
    t = t.replace("\\(", "").replace("\\)", "")
    return " ".join(t.split())


@pytest.mark.parametrize("name", sorted(ZH_CORRECTIONS))
def test_correction_in_the_chinese_edition(name):
    page, wrong, right = ZH_CORRECTIONS[name]
    t = zh_text(page)
    assert not (wrong and re.search(wrong, t)), f"{page}: still {wrong!r}"
    assert re.search(right, t), f"{page}: missing {right!r}"


@pytest.mark.parametrize("name", sorted(CORRECTIONS))
def test_correction_in_the_built_book(name):
    page, wrong, right = CORRECTIONS[name]
    t = text(page)
    assert not (wrong and re.search(wrong, t)), f"{page}: still {wrong!r}"
    assert re.search(right, t), f"{page}: missing {right!r}"


def test_landing_page_lists_every_chapter_and_the_notation():
    t = raw("intro")
    for page in sorted((ROOT / "book").glob("[0-9][0-9]_*.md")):
        assert f'href="{page.stem}.html"' in t, page.stem
    assert re.search(r"\\Phi = \\Psi", text("intro"))


def test_mfu_is_linked_to_its_definition_where_first_used():
    assert 'id="mfu-definition"' in raw("05_tensor_parallel")
    for page in ("02_collectives", "03_sharding"):
        assert "05_tensor_parallel.html#mfu-definition" in raw(page), page


def test_corrections_table_and_links_to_it():
    assert 'id="corrections"' in raw("15_choosing")
    for page in ("01_memory", "02_collectives", "03_sharding", "04_zero",
                 "06_pipeline_parallel", "07_profiling"):
        assert "15_choosing.html#corrections" in raw(page), page


# seed 000's five exam points, seed 004's question and three follow-ups,
# and the three topics the course did not answer before
ANSWERS = {"iv-ledger": "01_memory", "iv-fsdp": "03_sharding",
           "iv-choose": "04_zero", "iv-profiler": "07_profiling",
           "iv-70b": "01_memory", "iv-frameworks": "15_choosing",
           "iv-zero3-vs-fsdp": "04_zero", "iv-tp-pp": "06_pipeline_parallel",
           "iv-colossalai": "09_colossalai",
           "iv-megatron": "06_pipeline_parallel",
           "iv-experts": "13_experts", "iv-bf16": "14_precision",
           "iv-fp8": "14_precision", "iv-roofline": "16_roofline",
           "iv-hang": "17_hangs", "iv-zero-bubble": "18_schedules",
           "iv-optimizers": "19_optimizers"}


def test_every_interview_question_has_a_box_and_the_page_links_it():
    collection = raw("interview")
    for label, page in ANSWERS.items():
        box = re.search(rf'<div class="[^"]*\binterview\b[^"]*" '
                        rf'id="{label}">(.*?)</div>', raw(page), re.S)
        assert box, f"no 30-second answer {label} in {page}"
        assert "30-second answer" in box.group(1)
        assert f'href="{page}.html#{label}"' in collection, label
    for section in ("profiling-kernel-view", "colossalai-auto-parallel"):
        assert f"#{section}" in collection, section


def test_lab_pages_show_the_lesson_not_the_plumbing():
    """The bootstrap cell is not on the page (it still runs: nbval, Colab);
    the parameter check is folded away (hide-input)."""
    _built()
    pages = sorted((HTML / "labs").glob("[0-9]*_*.html"))
    assert pages
    for page in pages:
        t = page.read_text()
        assert "LABKIT_SOURCE" not in t, page.name
        lab = page.stem.partition("_")[2]
        call = f'check("{lab}", globals())'
        cells = [c for c in re.split(r'<div class="cell(?=[ "])', t)[1:]
                 if call in html.unescape(re.sub(r"<[^>]+>", "", c))]
        if hasattr(checks, lab):   # its checks live in labkit.checks
            assert len(cells) == 1, page.name
            assert "hide-input" in cells[0].split('"', 1)[0], page.name


# issue 29, section 3: every lab page that launches distributed code shows
# it (an inspect.getsource cell), as labs 10 and 11 did first
SHOWS_ITS_CODE = {"01_memory": "run_strategy", "08_checkpoint": "R.save",
                  "02_collectives": "sweep", "03_sharding": "wrap",
                  "04_zero": "run_torch_zero1",
                  "05_tensor_parallel": "dtensor_block",
                  "06_pipeline_parallel": "make_pipeline",
                  "07_profiling": "train", "09_colossalai": "run_plugin",
                  "10_mesh": "R.parallelize",
                  "11_context_parallel": "A.RingAttention.forward"}


@pytest.mark.parametrize("lab", sorted(SHOWS_ITS_CODE))
def test_lab_page_shows_the_distributed_code_it_runs(lab):
    _built()
    t = html.unescape(re.sub(r"<[^>]+>", "",
                             (HTML / "labs" / f"{lab}.html").read_text()))
    assert f"inspect.getsource({SHOWS_ITS_CODE[lab]})" in t, lab


def _answer_boxes():
    for page in sorted({*ANSWERS.values()}):
        for m in re.finditer(r'<div class="[^"]*\binterview\b[^"]*" '
                             r'id="([^"]+)">(.*?)</div>', raw(page), re.S):
            yield page, m.group(1), m.group(2)


def test_30_second_answers_are_speakable_and_open_with_how_it_works():
    """Issue 29, section 3: at most 80 words, an opening line first (in
    bold), and the assumptions named."""
    boxes = list(_answer_boxes())
    assert len(boxes) >= len(ANSWERS)
    for page, label, body in boxes:
        body = re.sub(r'<p class="admonition-title">.*?</p>', "", body,
                      count=1, flags=re.S)
        words = html.unescape(re.sub(r"<[^>]+>", " ", body))
        words = words.replace("\\(", " ").replace("\\)", " ").split()
        assert len(words) <= 80, (label, len(words))
        assert re.match(r"\s*<p><strong>", body), (label, "opening line")
        assert re.search(r"\b[Aa]ssum", " ".join(words)), (label,
                                                           "assumptions")


def test_four_week_module_places_every_chapter_and_assignment():
    t = raw("instructor")
    sec = t[t.index('id="a-four-week-module"'):]
    sec = sec[:sec.index("</table>")]
    chapters, assignments = set(), set()
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", sec, re.S)[1:]:
        cells = [" ".join(html.unescape(re.sub(r"<[^>]+>", " ", c)).split())
                 for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        chapters |= {int(n) for n in re.findall(r"(?:^|, )(\d+) ", cells[1])}
        assignments |= {int(n) for n in
                        re.findall(r"(?:^|, |and )(\d+) \(", cells[2])}
    book = {int(f.name[:2]) for f in (ROOT / "book").glob("[0-9][0-9]_*.md")}
    masters = {int(f.name[:2]) for f in
               (ROOT / "labs" / "assignments").glob("[0-9][0-9]_*.ipynb")}
    assert chapters == book, sorted(chapters)
    assert assignments == masters, sorted(assignments)
