"""Lab cells that read timings, run as a rehearsal or ``timing_steps: 0``
leaves them: every timing None, and the cell says nothing of them
(issue 28: the rehearsal cuts every timing loop to none)."""
from __future__ import annotations

import json
from pathlib import Path

LABS = Path(__file__).resolve().parents[1] / "labs"


def _cell(lab: str, cell_id: str) -> str:
    nb = json.loads((LABS / lab).read_text())
    cell = next(c for c in nb["cells"] if c.get("id") == cell_id)
    return "".join(cell["source"])


class _Results:
    def __init__(self):
        self.rows = []

    def add(self, *a, **k):
        self.rows.append((a, k))

    def show(self, *a, **k):
        pass


def test_lab5_link_cell_without_timings():
    """Lab 5's link and TFLOP/s cell took ``max()`` over the ranks'
    timings before its ``None`` guard (``timing_steps: 0`` raised a
    TypeError): now the guard comes first and nothing is added."""
    from labkit.predict import collectives as C
    from labkit.predict.model import flops as FL
    from labkit.predict import tensor_parallel as TP
    rank = {"device_name": "NVIDIA H100 80GB HBM3", "results": [
        {"variant": v, "seconds_fwd_bwd_median": None}
        for v in ("scratch", "no_comm")]}
    res = _Results()
    env = {"runs": {2: [rank, rank]}, "tp_sizes": [2], "FL": FL, "C": C,
           "TP": TP, "res": res, "micro_batch": 1, "seq": 8, "hidden": 8,
           "elem": 2, "device": "cuda"}
    exec(_cell("05_tensor_parallel.ipynb", "3f9bc555"), env)
    assert res.rows == []
    timed = {"device_name": "cpu", "results": [
        {"variant": "scratch", "seconds_fwd_bwd_median": 0.3},
        {"variant": "no_comm", "seconds_fwd_bwd_median": 0.1}]}
    env.update(runs={2: [timed, {**timed, "results": [
        {"variant": "scratch", "seconds_fwd_bwd_median": 0.5},
        {"variant": "no_comm", "seconds_fwd_bwd_median": 0.2}]}]})
    exec(_cell("05_tensor_parallel.ipynb", "3f9bc555"), env)
    link = next(k for a, k in res.rows
                if a[0] == "comm_seconds_per_block_link")
    assert link["measured"] == 0.5 - 0.2     # the slowest rank's medians
