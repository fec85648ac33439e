"""What the doctor reads besides the split: host-bound GPU idle, after a
synchronize or from slow launches, and the facts of a step."""
import kineto_traces as K
from kineto_traces import ev
from labkit.measure.trace import kineto, step_facts
from labkit.measure import profiling as P


def test_host_bound_gaps_after_a_sync_and_from_launches(tmp_path):
    """Kernel B launched after A ended: a host-bound gap."""
    events = [
        ev("ProfilerStep#1", 0, 2000, cat="user_annotation"),
        ev("cudaLaunchKernel", 0, 1, cat="cuda_runtime", correlation=1),
        ev("k_a", 100, 200, cat="kernel", pid=0, tid=7, stream=7,
           correlation=1),
        ev("cudaStreamSynchronize", 50, 260, cat="cuda_runtime"),  # 310
        ev("cudaLaunchKernel", 600, 1, cat="cuda_runtime", correlation=2),
        ev("k_b", 700, 100, cat="kernel", pid=0, tid=7, stream=7,
           correlation=2),
        ev("cudaLaunchKernel", 1000, 1, cat="cuda_runtime", correlation=3),
        ev("k_c", 1200, 100, cat="kernel", pid=0, tid=7, stream=7,
           correlation=3),
    ]
    (s,) = P.analyze(K.write(tmp_path, 0, events))["ranks"][0]["steps"]
    assert s["step_us"] == 1200      # [100,1300); one step: none left out
    assert s["idle_after_sync_us"] == 400       # [300,700)
    assert s["idle_launch_us"] == 400           # [800,1200)
    assert s["idle_us"] == 800


def test_gaps_where_work_was_queued_are_not_the_hosts(tmp_path):
    """Both kernels launched at once: the gap between them is the GPU's."""
    events = K.kineto([(1, 0, 50), (2, 50, 50)], [
        (K.GEMM, 100, 50, 7, 10), (K.GEMM, 300, 50, 7, 11)])
    t = kineto.read(K.write(tmp_path, 0, events))
    assert step_facts.host_bound_idle(t, [(150, 300)]) == (0.0, 0.0)
    facts = step_facts.step_facts(t, 1, 100, 350, P.hta_split(
        t, t.kernels)["busy"], [(150, 300)])
    assert facts["kernels"] == 2 and facts["kernel_median_us"] == 50
    assert facts["idle_launch_us"] == 0


def test_one_rank_collectives_are_counted_from_the_calls(tmp_path):
    """With one rank NCCL runs no kernel for an in-place all-reduce: the
    step still made its calls (issue 17, defect 5: it counted 0)."""
    r = P.analyze(K.write(tmp_path, 0, K.one_rank_nccl(calls=3)))
    steps = r["ranks"][0]["steps"]
    assert steps and all(s["collectives"] == 3 for s in steps)
    assert all(s["collective_kernels"] == 0 for s in steps)


def test_real_gpu_trace_calls_match_kernels_and_survive_their_loss(
        tmp_path):
    """On a real 8-rank NCCL trace the calls equal the NCCL kernels per
    step; with the NCCL kernels deleted (what one rank records) the count
    stays."""
    import gzip
    import json
    from pathlib import Path

    import pytest
    f = (Path(__file__).resolve().parent.parent.parent / "shared" /
         "traces" / "gpu-a100-8rank-alltoall" / "rank-3.json.gz")
    if not f.is_file():
        pytest.skip(f"real GPU trace not found: {f}")
    whole = P.analyze(f)["ranks"][0]["steps"]
    assert all(s["collectives"] == s["collective_kernels"] > 0
               for s in whole)
    data = json.loads(gzip.decompress(f.read_bytes()))
    data["traceEvents"] = [e for e in data["traceEvents"] if not (
        e.get("cat") == "kernel" and e.get("name", "").startswith("nccl"))]
    g = tmp_path / "rank-3.json"
    g.write_text(json.dumps(data))
    alone = P.analyze(g)["ranks"][0]["steps"]
    assert [s["collectives"] for s in alone] == [
        s["collectives"] for s in whole]
    assert all(s["collective_kernels"] == 0 for s in alone)
