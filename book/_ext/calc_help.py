"""The calculators' option tooltips in each edition of the book (issue 32).

A calculator's form shows each option's ``help`` (argparse, the command
line's own text) as its tooltip. ``calc_core.LABELS`` holds the words
around a calculator per edition; this table, beside it, holds the
tooltips: English is the command line's text, another edition maps that
text to its words. The build (``calculators.py``) writes the page's words
into the form's ``title``; the browser never needs them (the form is the
build's). A shown option whose help has no entry stops that edition's
build, naming the help text (:func:`help_text`); flags and values stay as
typed.

    python book/_ext/calc_help.py     # every help of the book's calculators
"""
from __future__ import annotations

HELP = {
    "zh": {
        "a named architecture": "预置的模型结构（按名称）",
        "number of parameters, e.g. 70e9": "参数量，例如 70e9",
        "number of parameters, e.g. 7e9": "参数量，例如 7e9",
        "data-parallel ranks": "数据并行的 rank 数",
        "memory of one GPU in GB (1e9 bytes)":
            "单卡显存，单位 GB（1e9 字节）",
        "ZeRO stage 0-3 (0 = DDP, 3 = FSDP FULL_SHARD)":
            "ZeRO 阶段 0-3（0 = DDP，3 = FSDP FULL_SHARD）",
        "an FSDP sharding strategy instead of --stage":
            "用 FSDP 分片策略代替 --stage",
        "ranks per shard group (hybrid_shard)":
            "每个分片组的 rank 数（hybrid_shard）",
        "what the framework allocates beside the ledger: ledger (none), "
        "deepspeed, fsdp2, fsdp1, megatron":
            "框架在显存账之外分配的内存：ledger（无）、deepspeed、fsdp2、"
            "fsdp1、megatron",
        "accumulate gradients in fp32 (mixed precision)":
            "以 fp32 累加梯度（混合精度）",
        "ddp|no_shard|zero1|zero2|shard_grad_op|zero3|full_shard|"
        "hybrid_shard|hybrid_shard_zero2":
            "分片策略：ddp|no_shard|zero1|zero2|shard_grad_op|zero3|"
            "full_shard|hybrid_shard|hybrid_shard_zero2",
        "ranks per shard group (hybrid; default one node)":
            "每个分片组的 rank 数（hybrid；默认一个节点）",
        "link inside a node: nvlink2, nvlink3, nvlink4, nvlink5, pcie3, "
        "pcie4, pcie5":
            "节点内互联：nvlink2、nvlink3、nvlink4、nvlink5、pcie3、"
            "pcie4、pcie5",
        "link between nodes: ib-hdr, ib-ndr, ib-xdr, eth-25g, eth-100g, "
        "eth-400g":
            "节点间互联：ib-hdr、ib-ndr、ib-xdr、eth-25g、eth-100g、"
            "eth-400g",
        "bytes per all-gathered element (2 = bf16)":
            "all-gather 每个元素的字节数（2 = bf16）",
        "bytes per reduced element (default = param bytes)":
            "归约每个元素的字节数（默认与参数字节数相同）",
        "fraction of the links' peak bandwidth reached":
            "实际达到的链路峰值带宽比例",
        "tokens per GPU and step: adds the overlap check":
            "每卡每步的 token 数：加上通信与计算重叠的检查",
        "GPU whose 16-bit peak sets the compute time":
            "用其 16 位峰值算力计算计算时间的 GPU",
        "global batch size in sequences per iteration":
            "全局批大小：每次迭代的序列数",
        "achieved hardware TFLOP/s per GPU (counted with --recompute, as "
        "Megatron-LM reports it)":
            "每卡实际达到的硬件 TFLOP/s（按 --recompute 计入重计算，"
            "与 Megatron-LM 的报告方式相同）",
        "measured seconds per iteration": "实测的每次迭代秒数",
        "GPU preset for MFU (dense bf16 peak)":
            "计算 MFU 用的 GPU 预置（稠密 bf16 峰值）",
        "activation recomputation, for hardware FLOPs":
            "激活重计算（recomputation），用于计算硬件 FLOPs",
        "tied output layer, no final LayerNorm: Narayanan et al. 2021 "
        "Eq. 2 (default: labkit's untied GPT)":
            "输出层与嵌入共享权重、无最后的 LayerNorm：Narayanan 等 2021 "
            "式 2（默认：labkit 的不共享权重的 GPT）",
        "pipeline stages p (one per rank)":
            "流水线阶段数 p（每个 rank 一个）",
        "micro-batches per iteration m": "每次迭代的微批次数 m",
        "model chunks per rank v (interleaved only)":
            "每个 rank 的模型块数 v（仅 interleaved）",
        "forward time of one micro-batch through one stage":
            "一个微批次通过一个阶段的前向时间",
        "backward time (default 2x forward)": "反向时间（默认为前向的 2 倍）",
        "point-to-point delay between stages": "阶段之间的点对点通信延迟",
    },
}


def help_text(text: str, lang: str = "en") -> str:
    """An option's tooltip in ``lang``: the command line's own ``help`` in
    English, else HELP's entry; KeyError naming a missing one."""
    if lang not in HELP or not text:
        return text
    try:
        return HELP[lang][text]
    except KeyError:
        raise KeyError(f"calc_core.HELP[{lang!r}] has no tooltip for the "
                       f"option help {text!r}") from None



def book_calculators(root) -> list[tuple[str, str, list[str], list | None]]:
    """Every ``{calculator}`` of the book's pages under ``root``: (page,
    command, argv, shown fields or None)."""
    import shlex
    from pathlib import Path
    out = []
    for page in sorted((Path(root) / "book").glob("*.md")):
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            if not line.startswith("```{calculator}"):
                continue
            shown, j = None, i + 1
            if lines[j].startswith(":fields:"):
                shown, j = lines[j].split()[1:], j + 1
            out.append((page.name, line.split()[1],
                        shlex.split(lines[j]), shown))
    return out


if __name__ == "__main__":
    from pathlib import Path
    import calc_core
    for page, name, argv, shown in book_calculators(
            Path(__file__).resolve().parents[2]):
        for f in calc_core.fields(name, argv):
            if f["help"]:
                print(page, name, f["flag"], repr(f["help"]),
                      HELP["zh"].get(f["help"], "(none)"))
