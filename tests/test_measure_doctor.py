"""The doctor: its rules on breakdowns with one known cause and its triage
order (its two what-if models: test_measure_what_if)."""
from pathlib import Path

import pytest

from labkit.measure.trace import doctor
from labkit.measure import profiling

TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"


def report(device="cpu", loader="single-process", **step):
    """A one-rank, two-step report; ``step`` overrides the defaults."""
    base = {"step_us": 100_000.0, "compute_us": 80_000.0,
            "communication_us": 3_000.0, "data_us": 3_000.0,
            "other_us": 0.0, "idle_us": 14_000.0, "comm_total_us": 10_000.0,
            "overlap_us": 5_000.0, "phases_us": {"forward": 30_000.0,
                                                 "backward": 50_000.0},
            "collectives": 2, "collective_median_us": 2_500.0,
            "kernels": 50, "kernel_median_us": 500.0, "items": 0,
            "sync_us": 0.0, "exposed_comm_outside_backward_us": 0.0,
            "idle_after_sync_us": 0.0, "idle_launch_us": 0.0}
    base.update(step)
    steps = [dict(base, step=1), dict(base, step=2)]
    top = [{"kind": "compute", "name": "aten::mm", "count": 4,
            "total_us": 60_000.0},
           {"kind": "communication", "name": "gloo:all_reduce",
            "count": 4, "total_us": 20_000.0}]
    return {"run_dir": "x", "ranks": [{
        "rank": 0, "file": "x", "device": device, "loader": loader,
        "steps": steps, "total": profiling.combine(steps), "top": top}]}


def causes(rep):
    return [f.cause for f in doctor.diagnose(rep)]


def test_a_healthy_step_has_no_finding():
    assert causes(report(loader="multi-process")) == []


def test_data_wait_first_with_its_evidence():
    rep = report(data_us=40_000.0, compute_us=45_000.0)
    (f,) = doctor.diagnose(rep)
    assert f.cause == "data" and f.cost_ms == 40.0 and f.share_pct == 40.0
    assert "single-process" in f.evidence and "40.00 ms" in f.evidence
    text = " ".join(f.advice)
    for knob in ("num_workers", "prefetch_factor", "persistent_workers",
                 "data format"):
        assert knob in text
    assert "pin_memory" not in text            # a CPU run
    assert "pin_memory" in " ".join(doctor.diagnose(
        report(device="gpu", data_us=40_000.0))[0].advice)


def test_exposed_comm_with_many_small_collectives_points_at_buckets():
    rep = report(communication_us=30_000.0, compute_us=55_000.0,
                 collectives=40, collective_median_us=300.0)
    (f,) = doctor.diagnose(rep)
    assert f.cause == "communication" and f.cost_ms == 30.0
    text = " ".join(f.advice)
    for knob in ("bucket_cap_mb", "gradient_as_bucket_view",
                 "reshard_after_forward", "no_sync"):
        assert knob in text
    assert "40.0 collectives" in f.evidence


def test_a_blocking_collective_outside_backward_is_a_sync_point():
    rep = report(communication_us=12_000.0, compute_us=73_000.0, items=1,
                 exposed_comm_outside_backward_us=9_000.0)
    found = {f.cause: f for f in doctor.diagnose(rep)}
    assert found["sync"].cost_ms == 9.0
    # the gradient sync is what is left: 12 - 9 ms, below 5% -> not listed
    assert "communication" not in found
    assert ".item()" in " ".join(found["sync"].advice)


def test_gpu_idle_is_split_between_sync_and_launch():
    rep = report(device="gpu", idle_us=30_000.0, compute_us=60_000.0,
                 items=2, idle_after_sync_us=20_000.0,
                 idle_launch_us=8_000.0, kernels=2000, kernel_median_us=6.0)
    found = {f.cause: f for f in doctor.diagnose(rep)}
    assert found["sync"].cost_ms == 20.0 and found["launch"].cost_ms == 8.0
    assert [f.cause for f in doctor.diagnose(rep)][:2] == ["sync", "launch"]
    text = " ".join(found["launch"].advice)
    assert "torch.compile" in text and "CUDA graphs" in text


def test_triage_order():
    lines = doctor.triage(report())
    assert [ln[:2] for ln in lines] == ["1.", "2.", "3."]
    assert "compute 80%" in lines[0] and "CPU time" in lines[0]
    assert lines[1].index("backward") < lines[1].index("forward")
    assert "aten::mm 30.00 ms" in lines[2]
    assert "gloo:all_reduce" in lines[2]


def test_empty_report_is_refused():
    with pytest.raises(ValueError, match="no profiled steps"):
        doctor.diagnose({"run_dir": "x", "ranks": []})


@pytest.mark.skipif(not (TRACES / "gpu-128rank-sampled").is_dir(),
                    reason=f"real GPU traces not found in {TRACES}")
def test_real_trace_findings_are_consistent():
    rep = profiling.analyze(TRACES / "gpu-128rank-sampled")
    found = doctor.diagnose(rep)
    assert [f.cost_ms for f in found] == sorted(
        (f.cost_ms for f in found), reverse=True)
    idle = doctor._mean(rep, "idle_us") / 1e3
    assert sum(f.cost_ms for f in found
               if f.cause in ("sync", "launch")) <= idle + 1e-6
