"""The collective counter sees every kind of call, with logical sizes."""
import pytest

from labkit.launch import launch

pytestmark = pytest.mark.distributed


def test_counter_counts_each_collective_once(tmp_path):
    res = launch("labkit.runs.collectives", 2, ["--counter-check"],
                 timeout=180, run_dir=tmp_path / "run")
    for rank in res:
        got = [{k: r[k] for k in ("op", "numel", "bytes")}
               for r in rank["records"]]
        # one record per call: the functional collectives are not counted
        # twice through the c10d ops they call
        assert got == rank["expected"]
        assert all(r["group_size"] == 2 for r in rank["records"])
        assert {r["c10d_op"] for r in rank["records"]} >= {
            "c10d::allreduce_", "c10d::_allgather_base_",
            "c10d::_reduce_scatter_base_", "_c10d_functional::all_reduce"}


def test_counter_api_without_a_process_group():
    from labkit.measure.collectives import CollectiveCounter
    import torch
    with CollectiveCounter() as c:
        torch.ones(3).sum()          # no collective: nothing counted
    assert c.records == [] and c.summary() == {} and c.total_bytes() == 0
    with pytest.raises(ValueError):
        c.total_bytes("allreduce")
