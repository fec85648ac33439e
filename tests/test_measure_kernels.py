"""labkit.measure.trace.kernels: the kernel view of a trace, on a synthetic trace
and on the real A100 trace the book reads (HTA's test data, trimmed to its
kernels: book/data/a100_rank3_kernels.json.gz)."""
from pathlib import Path

import pytest

from labkit.measure.trace import kernels, kineto

ROOT = Path(__file__).resolve().parent.parent
BOOK_TRACE = ROOT / "book" / "data" / "a100_rank3_kernels.json.gz"
FULL_TRACE = (ROOT.parent / "shared" / "traces" / "gpu-a100-8rank-alltoall"
              / "rank-3.json.gz")


def _k(name, dur, occ=None):
    args = {} if occ is None else {kernels.OCCUPANCY: occ}
    return {"ph": "X", "cat": "kernel", "name": name, "ts": 0, "dur": dur,
            "args": args}


def test_grouped_sorted_and_weighted_by_duration():
    trace = {"traceEvents": [
        _k("gemm", 30, 50), _k("gemm", 10, 10), _k("ncclKernel_AllReduce", 60),
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 999}]}
    rows = kernels.table(trace)
    assert [r["kernel"] for r in rows] == ["ncclKernel_AllReduce", "gemm"]
    nccl, gemm = rows
    assert nccl["kind"] == "COMMUNICATION" and nccl["occupancy_pct"] is None
    assert gemm["calls"] == 2 and gemm["total_us"] == 40
    assert gemm["mean_us"] == 20 and gemm["share_pct"] == 40
    assert gemm["occupancy_pct"] == pytest.approx((30 * 50 + 10 * 10) / 40)
    assert kernels.table(trace, top=1) == rows[:1]


def test_the_books_trace_is_the_real_one_trimmed():
    rows = kernels.table(kineto.load(BOOK_TRACE), top=None)
    assert rows[0]["kind"] == "COMMUNICATION"
    assert sum(r["share_pct"] for r in rows) == pytest.approx(100)
    if not FULL_TRACE.exists():
        pytest.skip("no ../shared/traces beside the repository")
    full = kernels.table(kineto.load(FULL_TRACE), top=None)
    assert full == rows


def test_cli_errors_in_one_line(tmp_path, capsys):
    assert kernels.main([str(tmp_path / "nope.json")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert kernels.main([]) == 2
