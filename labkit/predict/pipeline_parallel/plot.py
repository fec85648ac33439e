"""The picture of a pipeline schedule: a Gantt chart, one row per rank.

    from labkit.predict.pipeline_parallel.plot import plot_timeline
    plot_timeline(simulate("1f1b", 4, 8).ops, 4)

The figure of the papers (Narayanan et al. 2021, Fig. 3 and 4), drawn
from a simulated :class:`labkit.predict.pipeline_parallel.simulator.Op` list or
from the events a measured run writes. matplotlib is imported only when a
plot is drawn.
"""
from __future__ import annotations

from dataclasses import asdict

COLORS = {"F": ("#4C72B0", "#9DB7DB"), "B": ("#DD8452", "#F1C3A6"),
          "I": ("#DD8452", "#F1C3A6"), "W": ("#55A868", "#A8D5B5")}


def plot_timeline(ops, ranks: int | None = None, ax=None,
                  title: str | None = None, unit: str = "time",
                  labels: bool = True):
    """Draw operations as a Gantt chart, one row per rank (rank 0 on top).

    ``ops`` are :class:`Op` or dicts with the same keys (a measured run
    writes those). Forwards are blue, backwards orange (split: the input
    gradient ``I`` orange, the weight gradient ``W`` green); the second
    chunk of an interleaved or V rank is drawn lighter. Returns the
    matplotlib axes.
    """
    import matplotlib.pyplot as plt  # only when drawing

    rows = [o if isinstance(o, dict) else asdict(o) for o in ops]
    ranks = ranks or (1 + max(o["rank"] for o in rows))
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 0.5 + 0.45 * ranks))
    span = max(o["end"] for o in rows) - min(o["start"] for o in rows)
    for o in rows:
        width = o["end"] - o["start"]
        color = COLORS[o["kind"]][o.get("chunk", 0) % 2]
        ax.barh(o["rank"], width, left=o["start"], height=0.8, color=color,
                edgecolor="white", linewidth=0.5)
        if labels and width > span / 60:
            ax.text(o["start"] + width / 2, o["rank"], str(o["microbatch"]),
                    ha="center", va="center", fontsize=7,
                    color="white" if o.get("chunk", 0) % 2 == 0 else "black")
    ax.set_yticks(range(ranks))
    ax.set_yticklabels([f"rank {r}" for r in range(ranks)])
    ax.set_ylim(ranks - 0.5, -0.5)
    ax.set_xlabel(unit)
    if title:
        ax.set_title(title, fontsize=10)
    return ax
