"""How a calculator's result reads: human units, a verdict, a chart.

``calc_core`` runs ``python -m labkit COMMAND ... --json``; this module
turns that JSON into what a reader wants: values in units a person reads
(GB and GiB, ms or s, %, billions), one verdict sentence, and, for the
memory ledger and the communication of a step, an inline SVG bar chart
(no library, nothing fetched). The same code runs in the book build
(CPython: the static worked example) and in the browser (Pyodide: every
change), in the page's language (``WORDS``: ``en``, ``zh``). The numbers
are the command's own; only their units change (GB = 1e9 bytes, the
command line's; GiB = 2**30 bytes beside it).

    python book/_ext/calc_view.py memory --params 70e9 --gpus 8 --stage 3
"""
from __future__ import annotations

import html

GB, GIB = 1e9, 2.0 ** 30

WORDS = {
    "en": {
        "fits": "Fits with {free} headroom per GPU: {total} of {mem}, the "
                "model states plus the runtime floor (activations come on "
                "top).",
        "nofit": "Does not fit: needs {total} per GPU with the runtime "
                 "floor, the GPU has {mem}",
        "host": "Does not fit the host: {need} per node, it has {have}",
        "floor": "framework + runtime floor",
        "fewest": "; {n} GPUs ({nodes} nodes) would fit",
        "offload": "; or offload the {what} on {gpus} GPUs",
        "comm": "Each GPU sends {sent} per step ({phi} × Φ bytes "
                "logically), about {time} of communication.",
        "flops": "One iteration takes {time} on {gpus} GPUs: {tok} "
                 "tokens/s at {mfu} MFU ({hfu} HFU).",
        "pipe": "Bubble {bubble} (simulated {sim}): a step takes {step} "
                "units of --forward where {ideal} would be ideal "
                "({m} micro-batches on {p} stages).",
        "params": "parameters", "grads": "gradients",
        "optimizer": "optimizer states", "transient": "gathered weights",
        "gpu_bar": "GPU", "cpu_bar": "CPU", "limit": "GPU memory {mem}",
        "mem_title": "Memory per GPU by component",
        "comm_title": "Bytes each GPU sends per step, by collective",
        "n": [(1e12, "trillion"), (1e9, "billion"), (1e6, "million"),
              (1e3, "thousand")],
    },
    "zh": {
        "fits": "放得下，每张 GPU 余量 {free}：模型状态加运行时底座共 "
                "{total}，显存 {mem}（激活值另计）。",
        "nofit": "放不下：算上运行时底座每张 GPU 需 {total}，GPU 显存只有 "
                 "{mem}",
        "host": "主机内存不够：每个节点需 {need}，只有 {have}",
        "floor": "框架与运行时底座",
        "fewest": "；{n} 张 GPU（{nodes} 个节点）可以放下",
        "offload": "；或在 {gpus} 张 GPU 上卸载{what}",
        "comm": "每张 GPU 每步发送 {sent}（逻辑上 {phi} × Φ 字节），"
                "通信约 {time}。",
        "flops": "一次迭代在 {gpus} 张 GPU 上耗时 {time}：每秒 {tok} 个 "
                 "token，MFU {mfu}（HFU {hfu}）。",
        "pipe": "气泡率 {bubble}（模拟 {sim}）：一步耗时 {step} 个 "
                "--forward 单位，理想为 {ideal}（{p} 个阶段、{m} 个微批次）。",
        "params": "参数", "grads": "梯度", "optimizer": "优化器状态",
        "transient": "聚合的权重", "gpu_bar": "GPU", "cpu_bar": "CPU",
        "limit": "GPU 显存 {mem}", "mem_title": "每张 GPU 的显存（按组成）",
        "comm_title": "每张 GPU 每步发送的字节（按集合通信）",
        "n": [(1e12, "万亿"), (1e8, "亿"), (1e4, "万")],
    },
}
# what the optimizer offload is called in a sentence (--offload's choices)
OFFLOAD = {"zh": {"optimizer": "优化器状态", "params": "参数",
                  "optimizer+params": "优化器状态和参数"}}
COLORS = {"params": "#4c72b0", "grads": "#dd8452", "optimizer": "#55a868",
          "transient": "#8172b3", "floor": "#937860"}
PART = ("params", "grads", "optimizer", "transient")


def gb(b: float) -> str:
    """Bytes as the command line's GB (1e9), GiB beside it."""
    return f"{b / GB:,.1f} GB ({b / GIB:,.1f} GiB)"


def short_gb(b: float) -> str:
    return f"{b / GB:,.1f} GB"


def seconds(s: float) -> str:
    return f"{s * 1e3:,.1f} ms" if s < 1 else f"{s:,.2f} s"


def pct(f: float) -> str:
    return f"{f * 100:.1f} %"


def count(n: float, lang: str = "en") -> str:
    """A big count with its word (70.0 B; 700 亿)."""
    for size, word in WORDS[lang]["n"]:
        if abs(n) >= size:
            return f"{n / size:,.4g} {word}"
    return f"{n:,.4g}"


def _kind(key: str) -> str:
    """Which unit a result key holds (the commands' JSON names)."""
    last = key.rsplit(".", 1)[-1]
    if last in ("mfu", "hfu") or "fraction" in last or last.startswith(
            "bubble"):
        return "pct"
    if last in ("seconds", "iteration_seconds"):
        return "s"
    ledger = key.startswith(("ledger.", "verdict."))
    if (ledger and last.endswith(("_gpu", "_cpu", "_total", "_mem",
                                  "_need", "headroom"))
            or key.startswith(("framework.", "floor.")) and last in (
                "gpu", "cpu", "bytes")
            or last.endswith("bytes") or last == "sent"):
        return "bytes"
    if last in ("params", "matmul_params", "tokens", "numel",
                "tokens_per_second"):
        return "count"
    return ""


def value(key: str, v, lang: str = "en") -> str | None:
    """``v`` of result key ``key`` in human units, or None (leave it)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    kind = _kind(key)
    if kind == "bytes":
        if v == 0:
            return "0 GB"
        if abs(v) >= 1e8:
            return gb(v)
        return f"{v / 1e6:,.1f} MB ({v / 2 ** 20:,.1f} MiB)"
    if kind == "pct":
        return pct(v)
    if kind == "s":
        return seconds(v)
    if kind == "count" and abs(v) >= 1e4:
        return count(v, lang)
    return None


def verdict(name: str, r: dict, lang: str = "en") -> str:
    """One sentence saying what the result means ("" if none)."""
    w = WORDS[lang]
    if "error" in r:
        return ""
    if name == "memory":
        led, v = r["ledger"], r["verdict"]
        total, mem = v["gpu_total"], v["gpu_mem"]
        if v.get("host_fits") is False:   # offloaded states, the host
            return w["host"].format(need=short_gb(v["host_need"]),
                                    have=short_gb(v["host_mem"])) + (
                "." if lang == "en" else "。")
        if total <= mem:
            return w["fits"].format(total=short_gb(total), mem=short_gb(mem),
                                    free=short_gb(mem - total))
        s = w["nofit"].format(total=short_gb(total), mem=short_gb(mem))
        if v.get("smallest_gpus"):
            s += w["fewest"].format(n=v["smallest_gpus"],
                                    nodes=v["smallest_nodes"])
        if v.get("offload_that_fits"):
            what = v["offload_that_fits"]
            s += w["offload"].format(
                what=OFFLOAD.get(lang, {}).get(what, what),
                gpus=led["gpus"])
        return s + ("." if lang == "en" else "。")
    if name == "comm":
        return w["comm"].format(sent=short_gb(r["sent_bytes"]),
                                phi=f"{r['units_of_phi']:g}",
                                time=seconds(r["seconds"]))
    if name == "flops":
        return w["flops"].format(
            time=seconds(r["iteration_seconds"]), gpus=r["gpus"],
            tok=count(r["tokens_per_second"], lang), mfu=pct(r["mfu"]),
            hfu=pct(r["hfu"]))
    if name == "pipeline":
        return w["pipe"].format(
            bubble=pct(r["bubble_formula"]), sim=pct(r["bubble_simulated"]),
            step=f"{r['step_time']:g}", ideal=f"{r['ideal_time']:g}",
            m=r["microbatches"], p=r["stages"])
    return ""


def _bars(title: str, bars: list, limit: tuple | None,
          legend: list) -> str:
    """Horizontal bars, each a stack of ``(part, bytes, color)``; an
    optional vertical ``limit`` line ``(bytes, label)``; a legend of
    ``(label, color)``. Inline SVG, its words escaped."""
    w, row, top = 560, 26, 22
    left = max(40, 7 * max(len(label) for label, _ in bars) + 10)
    most = max([sum(b for _, b, _ in parts) for _, parts in bars]
               + [limit[0] if limit else 0]) or 1
    scale = (w - left - 90) / most
    h = top + row * len(bars) + 22 + 16 * ((len(legend) + 2) // 3)
    e = html.escape
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" '
           f'width="{w}" height="{h}" role="img" class="calc-plot '
           f'calc-chart"><title>{e(title)}</title>'
           f'<text x="0" y="14" font-size="12">{e(title)}</text>']
    for i, (label, parts) in enumerate(bars):
        y, x = top + i * row, left
        out.append(f'<text x="0" y="{y + 16}" font-size="11">{e(label)}'
                   "</text>")
        for part, b, color in parts:
            width = b * scale
            out.append(f'<rect x="{x:.1f}" y="{y + 3}" width="{width:.1f}" '
                       f'height="{row - 6}" fill="{color}" '
                       f'data-part="{e(part)}"><title>{e(part)}: '
                       f"{e(gb(b))}</title></rect>")
            x += width
        total = sum(b for _, b, _ in parts)
        out.append(f'<text x="{x + 4:.1f}" y="{y + 16}" font-size="11">'
                   f"{e(short_gb(total))}</text>")
    if limit:
        x = left + limit[0] * scale    # the first bar's (the GPU's) limit
        y1 = top + row
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{y1}" '
                   'stroke="#c44e52" stroke-width="2" '
                   'stroke-dasharray="4 3"/>'
                   f'<text x="{w}" y="14" text-anchor="end" font-size="11" '
                   f'fill="#c44e52">- - {e(limit[1])}</text>')
    y0 = top + row * len(bars) + 22
    for i, (label, color) in enumerate(legend):
        x, y = (i % 3) * 180, y0 + 16 * (i // 3)
        out.append(f'<rect x="{x}" y="{y}" width="10" height="10" '
                   f'fill="{color}"/><text x="{x + 14}" y="{y + 9}" '
                   f'font-size="11">{e(label)}</text>')
    return "".join(out) + "</svg>"


def chart(name: str, r: dict, lang: str = "en") -> str:
    """The memory ledger as stacked bars per component (GPU, and CPU when
    something is offloaded), the GPU's memory as a line; a step's bytes
    sent per collective. "" for the other commands."""
    w = WORDS[lang]
    if "error" in r:
        return ""
    if name == "memory":
        led = r["ledger"]
        gpu = [(w[p], led[f"{p}_gpu"], COLORS[p]) for p in PART
               if led.get(f"{p}_gpu")]
        extra = r["verdict"]["gpu_total"] - led["gpu_total"]
        if extra > 0:   # the framework's terms and the runtime floor
            gpu.append((w["floor"], extra, COLORS["floor"]))
        bars = [(w["gpu_bar"], gpu)]
        cpu = [(w[p], led[f"{p}_cpu"], COLORS[p]) for p in PART[:3]
               if led.get(f"{p}_cpu")]
        if cpu:
            bars.append((w["cpu_bar"], cpu))
        mem = r["verdict"]["gpu_mem"]
        shown = {p for _, parts in bars for p, _, _ in parts}
        return _bars(w["mem_title"], bars,
                     (mem, w["limit"].format(mem=short_gb(mem))),
                     [(w[p], COLORS[p]) for p in PART + ("floor",)
                      if w[p] in shown])
    if name == "comm" and r.get("by_op"):
        palette = list(COLORS.values())
        bars = [(op.replace("_", "-"), [(op, d["sent"],
                                              palette[i % len(palette)])])
                for i, (op, d) in enumerate(r["by_op"].items())]
        return _bars(w["comm_title"], bars, None, [])
    return ""


if __name__ == "__main__":
    import sys
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    import calc_core
    res = calc_core.run(sys.argv[1], sys.argv[2:])
    print(verdict(sys.argv[1], res))
    for row in calc_core.rows(res):
        print(row)
