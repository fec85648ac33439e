"""labkit.buildit.fsdp (lab 3's FSDP lifecycle) and
labkit.buildit.context_parallel (lab 11's ring attention), graded on real
gloo runs: the answer key from the otter master scores full marks, the
blank 0, each wrong implementation of tests/buildit/fsdp_*.py and
cp_*.py its partial score, with a reason for each failed check only."""
import re

import nbformat
import pytest

from labkit import buildit
from tests.test_buildit import (FIXTURES, ROOT, blank_of, json_only,
                                key_of)

MASTERS = {"fsdp": "03_sharding", "context_parallel": "11_context_parallel"}
PREFIX = {"fsdp": "fsdp_", "context_parallel": "cp_"}
FAILS = {
    "fsdp_no_free": {"peak"},
    "fsdp_shard_grad_op": {"bytes", "peak"},   # no second all-gather
    "fsdp_all_reduce": {"bytes"},
    "fsdp_sum": {"params"},
    "fsdp_cached": {"peak"},   # seen through the all-gathers' outputs
    "cp_no_rescale": {"output", "grads"},
    "cp_no_return": {"grads", "bytes"},
    "cp_blocking": {"overlap"},
    "cp_all_gather": {"bytes", "overlap"},
}


def solution_cell(lab):
    """The student's cell: the code cell two before the one that runs
    ``buildit.run("<lab>", ...)`` (the whole cell goes to the ranks)."""
    cells = nbformat.read(ROOT / "labs" / "assignments" /
                          f"{MASTERS[lab]}.ipynb", as_version=4).cells
    i = next(k for k, c in enumerate(cells)
             if re.search(rf'buildit\.run\("{lab}"', c.source))
    assert cells[i - 1].cell_type == "raw" and "END SOLUTION" in \
        cells[i - 1].source
    return cells[i - 2].source


@pytest.mark.distributed
@pytest.mark.parametrize("lab", sorted(MASTERS))
def test_key_full_blank_zero_wrong_partial(lab):
    cell = solution_cell(lab)
    sources = {"key": key_of(cell), "blank": blank_of(cell)}
    assert "BEGIN SOLUTION" not in sources["blank"]
    wrong = sorted(FIXTURES.glob(f"{PREFIX[lab]}*.py"))
    assert len(wrong) >= 3, "several plausible wrong implementations"
    sources.update({f.stem: f.read_text() for f in wrong})
    results = buildit.run(lab, sources=sources,
                          config=buildit.harness(lab).HIDDEN)
    for name, result in results.items():
        rows = buildit.grade(result)
        got, most = buildit.score(result)
        failed = {r["check"] for r in rows if not r["passed"]}
        want = {"key": set(), "blank": {r["check"] for r in rows}}.get(
            name, FAILS.get(name))
        assert failed == want, (name, rows)
        for r in rows:  # a reason for each failed check, none otherwise
            assert bool(r["reason"]) == (not r["passed"]), (name, r)
        assert got == most - sum(r["max"] for r in rows
                                 if r["check"] in want)
        if name == "blank":
            assert got == 0
        json_only(result)


@pytest.mark.parametrize("lab", sorted(MASTERS))
def test_problem_and_floor_read_the_configuration(lab):
    h = buildit.harness(lab)
    rows = buildit.problem(lab)
    assert [r["check"] for r in rows] == [c for c, _, _ in h.CHECKS]
    assert sum(r["points"] for r in rows) == 4
    cfg = {**h.CONFIG, **h.HIDDEN}
    assert h.min_wire(cfg, buildit.LABS[lab]) > 100_000


def test_fsdp_bound_is_one_unit_and_its_prefetch():
    from labkit.buildit import fsdp
    sizes = fsdp.CONFIG["sizes"]
    pads = fsdp.padded(sizes, 2)
    assert pads == [562, 1088, 1024, 128]      # 561 and 1023 padded
    assert fsdp.bound(sizes, 2) == 4 * (1088 + 1024)
    # every unit alive at once is above it (a step without the free fails)
    for cfg in (fsdp.CONFIG, {**fsdp.CONFIG, **fsdp.HIDDEN}):
        assert 4 * sum(fsdp.padded(cfg["sizes"], 2)) > \
            fsdp.bound(cfg["sizes"], 2)


def test_fsdp_probe_counts_live_storages_only():
    import torch

    from labkit.buildit.fsdp_units import Probe
    probe, a, b = Probe(), torch.zeros(10), torch.zeros(6)
    probe.track(a, a[2:], b)
    probe.sample("x")
    a.data = torch.empty(0)                       # freed
    b.untyped_storage().resize_(0)                # freed the FSDP way
    probe.sample("y")
    assert probe.samples == [["x", 64], ["y", 0]]


def test_ring_bytes_are_the_chapters():
    from labkit.buildit import context_parallel as C
    from labkit.predict.context_parallel import ring_bytes
    cfg = C.CONFIG
    kv = 2 * cfg["batch"] * cfg["heads"] * cfg["tokens"] * cfg["head_dim"] * 4
    assert ring_bytes(1, 4 * cfg["tokens"], cfg["heads"] * cfg["head_dim"],
                      4, elem=4)["send"]["bytes"] == (3 + 3 + 4) * kv


def test_cp_overlap_of_the_hub_s_points():
    """``overlap_of``: per receive, the matmul points between its issue
    and the first read of its block, in the window asked for; a block
    never read is None; a receive's point missing is an error."""
    from labkit.buildit import context_parallel as C

    def pts(window, *names):
        return [[n, window + 1, k, -1] for k, n in enumerate(names)]
    fwd = pts(0, "recv 0", C.MATMUL, C.MATMUL, "read 0", "recv 1",
              "read 1", "recv 2")
    other = pts(1, "recv 0", C.MATMUL, "read 0")
    outside = [["recv 5", 1, -1, -1]]
    assert C.overlap_of(fwd + other + outside, 0) == [2, 0, None]
    assert C.overlap_of(fwd + other, 1) == [1]
    with pytest.raises(ValueError, match="receive 0 is missing"):
        C.overlap_of(pts(0, "recv 1", "read 1"), 0)
