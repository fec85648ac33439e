"""The calculators' shared core: runs in the book build and in the browser.

The same code renders the static worked example at build time (CPython) and
the live result in the reader's browser (Pyodide): it runs a command of
``python -m labkit COMMAND ... --json`` in-process, so the page computes
exactly what the command line prints, and turns its JSON into table rows and,
for the pipeline, an SVG timeline. Standard library only (no torch, no
numpy): ``labkit.predict`` and this file are all the browser loads.

    python book/_ext/calc_core.py memory --params 70e9 --gpus 8   # rows
"""
from __future__ import annotations

import argparse
import contextlib
import html
import importlib
import io
import json
import sys

import calc_view

# Arguments a form never shows: output switches of the command line.
HIDDEN = {"help", "json", "plot", "hf_config"}   # a page has no files
# The model picker: ``--preset`` (the command line's own choices, the
# presets of labkit.predict.model.arch) stands for the model; while a preset is
# picked, the flags that give the model's shape are off (disabled in the
# form, left out of the command), as the command line wants one or the
# other.
MODEL = "preset"
SHAPE = {"params", "layers", "hidden", "heads", "vocab", "tied"}

# The words a calculator shows around the command's own output, per edition
# of the book (issue 32): the build picks the page's language
# (``calculators.py``), the browser gets the same strings from the page
# (``data-labels``) and the plot's from ``page_result(..., lang)``. Flags,
# result keys and the command line's error messages stay as the command
# line prints them (code, in both editions).
LABELS = {
    "en": {"worked": "Worked example:",
           "loading": "Loading Python (Pyodide) in this page\u2026",
           "computed": "Computed in your browser:",
           "error": "Error: ",
           "failed": "The calculator could not run here: ",
           "file": "This page was opened from disk (file://), where the "
                   "browser cannot load the calculator's Python: run `make "
                   "serve` in the repository and open {url} to change the "
                   "inputs (the worked example below was computed when the "
                   "book was built).",
           "rank": "rank {r}",
           "plot": "time (units of --forward); blue forward, orange "
                   "backward; step {step}",
           "title": "{schedule} timeline: p={p}, m={m}, bubble {bubble}"},
    "zh": {"worked": "算例：",
           "loading": "正在本页加载 Python（Pyodide）\u2026",
           "computed": "已在你的浏览器中计算：",
           "error": "错误：",
           "failed": "计算器无法在此运行：",
           "file": "本页是从磁盘（file://）打开的，浏览器无法在此加载计算器的 "
                   "Python：请在仓库中运行 `make serve`，再打开 {url} "
                   "即可修改输入（下面的算例是构建本书时算好的）。",
           "rank": "rank {r}",
           "plot": "时间（以 --forward 为单位）；蓝色为前向，橙色为反向；"
                   "一步 {step}",
           "title": "{schedule} 时间线：p={p}，m={m}，气泡率 {bubble}"},
}


def lang_of(language: str | None) -> str:
    """The LABELS key of a Sphinx ``language`` (``zh_CN`` -> ``zh``)."""
    return "zh" if (language or "").lower().startswith("zh") else "en"


def _commands() -> dict:
    from labkit.__main__ import COMMANDS
    return COMMANDS


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # the message, not an exit
        raise ValueError(message)


def parser(name: str, rules: bool = False) -> argparse.ArgumentParser:
    """The command's own parser (``add_arguments`` of its module); with
    ``rules``, every number and file argument checked as the command line
    checks it (:func:`labkit.cli_rules.apply`), so a bad value gets the
    command line's own message."""
    commands = _commands()
    if name not in commands:
        raise ValueError(f"unknown calculator {name!r} (labkit commands: "
                         f"{', '.join(commands)})")
    module = importlib.import_module(commands[name][0])
    p = _Parser(prog=f"python -m labkit {name}", add_help=False)
    module.add_arguments(p)
    if rules:
        from labkit import cli_rules
        cli_rules.apply(name, p)
    return p


def fields(name: str, argv: list[str]) -> list[dict]:
    """One form field per option of the command, prefilled from ``argv``."""
    p = parser(name)
    values = vars(p.parse_args(argv))
    out = []
    for a in p._actions:
        if a.dest in HIDDEN or not a.option_strings:
            continue
        v = values.get(a.dest)
        kind = ("check" if isinstance(a, argparse._StoreTrueAction)
                else "choice" if a.choices else "number"
                if a.type in (int, float) else "text")
        out.append({"flag": a.option_strings[0], "dest": a.dest, "kind": kind,
                    "choices": list(a.choices or []), "help": a.help or "",
                    "required": bool(a.required),
                    "value": "" if v is None else _plain(v),
                    "model": a.dest == MODEL, "shape": a.dest in SHAPE})
    if not any(f["model"] for f in out):   # no picker: no shape to switch
        for f in out:
            f["shape"] = False
    return out


def model_argv(values: dict[str, object]) -> dict[str, object]:
    """The form's values with the model picker applied: a picked preset
    drops the shape flags (what calculators.js does in the page)."""
    flags = {f"--{d.replace('_', '-')}" for d in SHAPE}
    if values.get(f"--{MODEL}") in (None, ""):
        return dict(values)
    return {k: v for k, v in values.items() if k not in flags}


def _plain(v) -> str | bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, float) and v.is_integer() and abs(v) >= 1e6:
        return f"{v:g}"
    return str(v)


def argv_from(values: dict[str, object]) -> list[str]:
    """A command line from a form: ``{"--params": "70e9", "--tied": True}``."""
    argv = []
    for flag, v in model_argv(values).items():
        if v is True:
            argv.append(flag)
        elif v not in (False, None, ""):
            argv += [flag, str(v)]
    return argv


def run(name: str, argv: list[str]) -> dict:
    """``python -m labkit NAME ARGV --json``, in-process: its parsed output.

    Bad input gives ``{"error": message}`` (the command line's own message).
    """
    from labkit import cli_rules
    p = parser(name, rules=True)
    module = importlib.import_module(_commands()[name][0])
    out = io.StringIO()
    try:
        args = p.parse_args(list(argv) + ["--json"])
        cli_rules.check_costs(name, args)
        with contextlib.redirect_stdout(out):
            module.main(args)
    except (ValueError, KeyError) as e:
        return {"error": e.args[0] if isinstance(e, KeyError) else str(e)}
    return json.loads(out.getvalue())


def fmt(v) -> str:
    """One cell: numbers to 4 significant digits, the rest as text."""
    if isinstance(v, bool) or v is None:
        return str(v).lower() if v is not None else "-"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) < 1e15 else f"{v:.4g}"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list) and all(not isinstance(x, (dict, list)) for x in v):
        return ", ".join(fmt(x) for x in v)
    return str(v)


def rows(result: dict, lang: str = "en") -> list[dict]:
    """Table rows of a result: ``{"key", "value"}`` for scalars (nested
    keys joined by dots), ``{"key", "columns", "cells"}`` for a list of
    records (e.g. the collectives of one step); values in human units
    (``calc_view.value``: GB and GiB, ms, %), the rest as ``fmt``."""
    out = []

    def show(key, v):
        human = calc_view.value(key, v, lang)
        return fmt(v) if human is None else human

    def walk(prefix, d):
        for k, v in d.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict):
                walk(key + ".", v)
            elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
                cols = list(v[0])
                out.append({"key": key, "columns": cols,
                            "cells": [[show(f"{key}.{c}", x.get(c))
                                       for c in cols] for x in v]})
            else:
                out.append({"key": key, "value": show(key, v)})

    walk("", result)
    return out


def svg(name: str, argv: list[str], lang: str = "en") -> str:
    """A small plot for the calculators whose chapter has one ("" if none),
    its words in ``lang`` (a LABELS key): the pipeline's timeline, else
    ``calc_view.chart`` (the memory ledger's bars, bytes per collective)."""
    if name != "pipeline":
        return calc_view.chart(name, run(name, argv), lang)
    if "error" in run(name, argv):
        return ""
    from labkit.predict.pipeline_parallel import simulate
    a = parser(name).parse_args(argv)
    tl = simulate(a.schedule, a.stages, a.microbatches, a.chunks, a.forward,
                  a.backward, a.comm)
    w, row, left = 560, 22, 52
    scale = (w - left - 8) / tl.makespan
    h = row * a.stages + 24
    say = LABELS.get(lang, LABELS["en"])
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" '
             f'width="{w}" height="{h}" role="img" class="calc-plot">',
             "<title>" + html.escape(say["title"].format(
                 schedule=a.schedule, p=a.stages, m=a.microbatches,
                 bubble=f"{tl.bubble:.3f}")) + "</title>"]
    for r in range(a.stages):
        parts.append(f'<text x="0" y="{r * row + 15}" font-size="11">'
                     + say["rank"].format(r=r) + "</text>")
    for o in tl.ops:
        color = "#4c72b0" if o.kind == "F" else "#dd8452"
        x, width = left + o.start * scale, max((o.end - o.start) * scale, 0.5)
        parts.append(f'<rect x="{x:.1f}" y="{o.rank * row + 2}" '
                     f'width="{width:.1f}" height="{row - 4}" fill="{color}" '
                     f'opacity="{1 - 0.35 * o.chunk:.2f}" stroke="white" '
                     'stroke-width="0.5"/>')
    parts.append(f'<text x="{left}" y="{h - 4}" font-size="11">'
                 + html.escape(say["plot"].format(step=f"{tl.makespan:g}"))
                 + "</text></svg>")
    return "".join(parts)


def page_result(name: str, argv_json: str, lang: str = "en") -> str:
    """What the browser asks for (argv as a JSON list): result, rows,
    verdict sentence and plot (their words in the page's ``lang``)."""
    argv = json.loads(argv_json)
    result = run(name, argv)
    return json.dumps({"result": result, "rows": rows(result, lang),
                       "verdict": calc_view.verdict(name, result, lang),
                       "svg": svg(name, argv, lang)})


if __name__ == "__main__":
    res = run(sys.argv[1], sys.argv[2:])
    print(calc_view.verdict(sys.argv[1], res))
    for r in rows(res):
        print(r)
