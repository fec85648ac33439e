"""A sleeping rank: the others fail at the set timeout, the sleeper is
named, nothing is left running."""
import pytest

from labkit.launch import LaunchError, launch
from labkit.measure.hang import orphans, read_heartbeats, stalled_ranks

pytestmark = pytest.mark.distributed


def test_hang_is_found_at_the_timeout(tmp_path):
    run = tmp_path / "hang"
    with pytest.raises(LaunchError):
        launch("labkit.runs.tools.hang", 2, {"stall_rank": 1, "at": 2,
                                       "sleep_s": 120, "timeout_s": 2},
               timeout=90, run_dir=run)
    assert stalled_ranks(run, 2) == [1]
    beat = read_heartbeats(run, 2)[0]
    assert beat["phase"] == "timed_out" and beat["collective"] == 2
    # the 2 s timeout raised it (no "timed_out" beat otherwise: the sleeper
    # sleeps 120 s, past the launch's 90 s); how much later than 2 s gloo
    # raises depends on the machine's load, so only the floor is asserted
    assert beat["waited_s"] >= 2.0 - 0.5
    assert orphans(run) == []


def test_nccl_waits_on_the_host():
    """NCCL's all_reduce returns at once; the run waits on the work handle
    with NCCL's blocking wait, so the timeout raises where waited_s is
    written (issue 17, defect 4). gloo's wait raises by itself."""
    from labkit.runs.tools.hang import blocking_wait
    assert blocking_wait("nccl") == {"TORCH_NCCL_BLOCKING_WAIT": "1"}
    assert blocking_wait("gloo") == {}
