"""Pipeline schedules give the single-process losses; the sweep records."""
import pytest

from labkit.launch import launch

pytestmark = pytest.mark.distributed
ARGS = {"schedules": "gpipe,1f1b,interleaved", "layers": 4, "hidden": 32,
        "seq": 16, "micro_batch": 2, "check_microbatches": 4,
        "microbatches": "2,4", "repeats": 1, "steps": 3, "chunks": 2}


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return launch("labkit.runs.pipeline_parallel", 2, ARGS, timeout=180,
                  run_dir=tmp_path_factory.mktemp("pp"))


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved"])
def test_losses_equal_reference(ranks, schedule):
    ref = ranks[0]["reference_losses"]
    got = ranks[1]["depths"]["2"][schedule]["losses"]   # the last stage
    assert len(ref) == 3
    assert got == pytest.approx(ref, abs=1e-5)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved"])
def test_sweep_records_every_chunk(ranks, schedule):
    v = 2 if schedule == "interleaved" else 1
    for rank in ranks:
        for m in (2, 4):
            sw = rank["depths"]["2"][schedule]["sweep"][str(m)]
            ev = sw["events"]
            assert len(ev) == 2 * m * v               # F and B of each
            assert {e["kind"] for e in ev} == {"F", "B"}
            assert all(e["end"] > e["start"] for e in ev)
            assert sw["bubble_median"] > 0


def test_ranks_outside_a_depth_outwait_the_process_group_timeout(tmp_path):
    """Rank 2 waits while ranks 0-1 run depth 2, longer than the process
    group's timeout (2 s here, 120 s on a node): its barrier is on a gloo
    group of its own timeout (issue 17, defect 6; it timed out). Ranks 0-1
    hold 2 x the timeout after the depth, so the wait outlasts the timeout
    by construction, on a machine of any speed (their work alone took
    1.58 s on a quiet machine: issue 33)."""
    timeout_s = 2.0
    out = launch("labkit.runs.pipeline_parallel", 3, {
        "stages": "2", "schedules": "gpipe", "microbatches": "2",
        "steps": 2, "repeats": 1, "layers": 4, "hidden": 64, "seq": 32,
        "timeout_s": timeout_s, "hold_s": 2 * timeout_s}, timeout=180,
        run_dir=tmp_path)
    assert out[2]["depths"] == {}               # left out of depth 2
    assert out[2]["waited_s"]["2"] > timeout_s  # past the group's timeout
