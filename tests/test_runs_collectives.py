"""The collectives sweep gives correct results and sane timings."""
import pytest

from labkit.launch import launch

pytestmark = pytest.mark.distributed


def test_sweep_results_are_correct(tmp_path):
    res = launch("labkit.runs.collectives", 2, {
        "min_bytes": 64, "max_bytes": 65536, "factor": 16, "iters": 2,
        "warmup": 1}, timeout=180, run_dir=tmp_path / "run")
    for rank in res:
        rows = rank["rows"]
        assert {r["op"] for r in rows} == {"all_reduce", "all_gather",
                                           "reduce_scatter"}
        # all-reduce sums, all-gather in rank order, reduce-scatter chunks
        assert all(r["correct"] for r in rows)
        assert all(r["seconds"] > 0 for r in rows)
        assert [r["bytes"] for r in rows[:3]] == [64, 1024, 16384]
        assert len(rows) == 9  # 3 operations x 3 sizes
