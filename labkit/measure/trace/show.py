"""How :mod:`labkit.measure.profiling`'s breakdown is shown: a plain-text
table, stacked bars of the mean step, one step's timeline.

    print(table(analyze("traces/slow")))
    plot_bars({"slow": analyze("traces/slow"), "fixed": ...})
    plot_timeline(read("traces/slow/rank-0.json.gz"), step=3)

(``labkit.measure.profiling`` re-exports all three.)
"""
from __future__ import annotations

from labkit.measure.trace.intervals import clip
from labkit.measure.trace.kineto import Trace
from labkit.measure.trace.rank_breakdown import KINDS, mean_step


def table(report: dict) -> str:
    """A plain-text table: one row per rank and step, then per-rank sums."""
    head = (f"{'rank':>4} {'step':>6} {'ms':>9} " + " ".join(
        f"{k[:7]:>8}" for k in KINDS) + f" {'overlap':>8}")
    lines = [f"{report['run_dir']}: % of each step (communication = "
             "exposed; overlap = comm under compute / comm)", head]

    def row(rank, label, d):
        pct = [100 * d[f"{k}_us"] / d["step_us"] if d["step_us"] else 0
               for k in KINDS]
        ov = "-" if d["overlap_pct"] is None else f"{d['overlap_pct']:.1f}%"
        return (f"{rank:>4} {label:>6} {d['step_us'] / 1e3:9.2f} "
                + " ".join(f"{p:7.1f}%" for p in pct) + f" {ov:>8}")
    for r in report["ranks"]:
        for s in r["steps"]:
            lines.append(row(r["rank"], s["step"], s))
        lines.append(row(r["rank"], "all", r["total"]))
        if r["steps_without_kernels"]:
            lines.append(f"{r['rank']:>4} steps without kernels: "
                         + ", ".join(map(str, r["steps_without_kernels"])))
    devices = sorted({r["device"] for r in report["ranks"]})
    lines.append(f"device: {', '.join(devices)} trace"
                 + (" (CPU time, not GPU time)" if devices == ["cpu"]
                    else ""))
    views = sorted({r["view"] for r in report["ranks"]})
    if "launch" in views:
        lines.append("GPU steps by kernel launch, HTA's rules: the last "
                     "profiled step left out; 'all' spans the first to the "
                     "last kept kernel")
    return "\n".join(lines)


COLORS = {"compute": "#4c72b0", "communication": "#dd8452",
          "data": "#55a868", "other": "#8172b3", "idle": "#c7c7c7"}


def plot_bars(reports: dict, ax=None, unit: str = "ms"):
    """Stacked bars of the mean step, one bar per (label, rank).

    ``reports`` maps a label (a configuration) to an :func:`analyze` result.
    """
    import matplotlib.pyplot as plt
    ax = ax or plt.subplots(figsize=(8, 3.5))[1]
    labels, bottoms = [], []
    for label, rep in reports.items():
        for r in rep["ranks"]:
            m = mean_step(rep, r["rank"])
            x = len(labels)
            labels.append(f"{label}\nrank {r['rank']}")
            bottom = 0.0
            for k in KINDS:
                ax.bar(x, m[k], bottom=bottom, color=COLORS[k],
                       label=k if x == 0 else None)
                bottom += m[k]
            bottoms.append(bottom)
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel(f"time per step ({unit})")
    ax.legend(fontsize=8, ncol=5, loc="upper right")
    return ax


def plot_timeline(t: Trace, step: int | None = None, ax=None):
    """One step of one rank: a lane per kind, the exclusive split on top."""
    import matplotlib.pyplot as plt
    ax = ax or plt.subplots(figsize=(9, 2.6))[1]
    n, lo, hi = next((s for s in t.steps if step in (None, s[0])), (None,) * 3)
    if n is None:
        raise ValueError(f"{t.path}: no step {step}")
    lanes = ["compute", "communication", "data", "other"]
    for y, kind in enumerate(lanes):
        bars = [((s - lo) / 1e3, (e - s) / 1e3)
                for s, e in clip(t.busy.get(kind, []), lo, hi)]
        ax.broken_barh(bars, (y - 0.35, 0.7), color=COLORS[kind])
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_xlim(0, (hi - lo) / 1e3)
    ax.set_xlabel(f"ms since the start of step {n} (rank {t.rank}, "
                  f"{t.device} trace)")
    return ax
