"""What a lab shows and saves: predicted, measured and their ratio.

    res = Results("memory", profile=profile, results_dir=results_dir)
    res.add("model_states", strategy="ddp", world_size=2,
            predicted=16 * psi, measured=measured_bytes, unit="bytes")
    res.show()      # a table in the notebook
    res.save()      # results.json, a list of records

Every record carries the device it was measured on (``cpu`` or the GPU's
name), so that a CPU figure can never pass for a GPU figure, and, once
saved, the run's provenance (``labkit.results.provenance.collect``: GPUs, versions,
date, commit, the runner's preflight summary).
"""
from __future__ import annotations

import json
import math
import os
import platform
from pathlib import Path

from labkit.checks.rules import require  # noqa: F401 (labs import it)

ROOT = Path(__file__).resolve().parent.parent
FIELDS = ("quantity", "strategy", "world_size", "predicted", "measured",
          "ratio", "unit")
# Results.show's table as data: {"columns": [...], "rows": [[cell, ...]]},
# each cell the text the notebook shows (book/_ext/lab_results.py)
MIME = "application/vnd.labkit.results+json"


def ratio(measured, predicted):
    """measured / predicted, or None when there is nothing to divide by."""
    if predicted in (None, 0) or measured is None:
        return None
    return measured / predicted


def describe_device(backend: str = "gloo") -> str:
    """``cpu (N cores)`` or the CUDA device name, for the records."""
    from labkit.rehearse.node import rehearsed
    node = rehearsed()              # fake ranks (labkit.rehearse)
    if node:
        return f"cuda: {node.gpu} (rehearsed)"
    if backend == "nccl":
        import torch
        return f"cuda: {torch.cuda.get_device_name(0)}"
    return f"cpu: {platform.processor() or platform.machine()}, {os.cpu_count()} cores"


class Results:
    def __init__(self, lab: str, profile: str = "cpu",
                 results_dir: str | Path | None = None):
        self.lab = lab
        self.profile = profile
        self.dir = Path(results_dir) if results_dir else (
            ROOT / "_build" / "labs" / "scratch" / lab)
        self.records: list[dict] = []

    def add(self, quantity: str, strategy: str, world_size: int, predicted,
            measured, unit: str, device: str | None = None, **extra) -> dict:
        rec = {"quantity": quantity, "strategy": strategy,
               "world_size": world_size, "predicted": predicted,
               "measured": measured, "ratio": ratio(measured, predicted),
               "unit": unit, "device": device or describe_device(),
               "profile": self.profile, **extra}
        self.records.append(rec)
        return rec

    def frame(self, quantity: str | None = None):
        import pandas as pd
        rows = [r for r in self.records
                if quantity is None or r["quantity"] == quantity]
        return pd.DataFrame(rows, columns=[*FIELDS, "device"] + sorted(
            {k for r in rows for k in r} - set(FIELDS) - {"device", "profile", "provenance"}))

    def show(self, quantity: str | None = None, digits: int = 4):
        """The records as a table: in a notebook, the cells as shown (text)
        under ``MIME`` too, so the book draws the table with column titles
        in the page's language (``book/_ext/lab_results.py``), the same
        cells; in plain Python, the table printed."""
        df = self.frame(quantity)
        fmt = {"ratio": lambda v: "" if _missing(v) else f"{v:.{digits}f}",
               "predicted": _number, "measured": _number}
        # the cells as the Styler shows them (it, too, gets Python scalars)
        cells = [[fmt.get(c, _cell)(v) for c, v in zip(df.columns, row)]
                 for row in df.itertuples(index=False)]
        text = type(df)(cells, columns=df.columns).to_string(index=False)
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            get_ipython = lambda: None  # noqa: E731
        if get_ipython() is None:   # plain Python
            print(text)
            return df
        display({MIME: {"columns": list(df.columns), "rows": cells},
                 "text/html": df.style.format(fmt).hide(axis="index")
                 .to_html(), "text/plain": text}, raw=True)
        return df

    def save(self) -> Path:
        from labkit.results.provenance import collect
        import os
        prov = collect(self.profile, preflight=json.loads(
            os.environ.get("LABKIT_PREFLIGHT") or "null"))
        for rec in self.records:
            rec.setdefault("provenance", prov)
        self.dir.mkdir(parents=True, exist_ok=True)
        out = self.dir / "results.json"
        out.write_text(json.dumps(self.records, indent=1))
        return out


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _cell(v) -> str:
    """A cell of a column other than predicted, measured, ratio, as pandas'
    Styler shows it by default: floats to 6 decimals, the rest ``str``."""
    return f"{v:.6f}" if isinstance(v, float) else str(v)


def _number(v) -> str:
    """1,079,296 for whole numbers, 4 significant digits otherwise."""
    if _missing(v):
        return ""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if float(v).is_integer() and abs(v) < 1e15:
        return f"{int(v):,}"
    return f"{v:.4g}"


def check(lab: str, params: dict):
    """Check a lab's parameters before any process starts: every value by
    its name's rule (:mod:`labkit.checks.params`; a string papermill
    handed over is parsed and written back into ``params``), then by the
    lab's function in :mod:`labkit.checks`; ``params`` is the namespace
    that holds them (a notebook passes ``globals()``). Raises
    ``ValueError`` with one line naming the parameter, its value and the
    rule; returns what the lab needs next (backend, config, ...).
    """
    import inspect

    from labkit import checks
    fn = getattr(checks, lab, None)
    if fn is None or lab.startswith("_") or not inspect.isfunction(fn) \
            or lab not in checks.LABS:
        raise ValueError(f"no parameter check for lab {lab!r}")
    names = inspect.signature(fn).parameters
    missing = [n for n, p in names.items() if n not in params
               and p.default is inspect.Parameter.empty]
    require(not missing, f"lab {lab}: parameters missing: "
            f"{', '.join(missing)}")
    parsed = checks.parse(params)
    for name, value in parsed.items():   # "300" -> 300 in the notebook
        if params[name] is not value and type(params[name]) is str:
            params[name] = value
    return fn(**{n: parsed.get(n, params[n]) for n in names if n in params})
