"""The breakdown: hand-made traces with known answers in both views, the
command line, real GPU traces. (Agreement with HolisticTraceAnalysis is
tested in ``test_measure_hta_breakdown.py``, reading in
``test_measure_kineto.py``; speed is a budget, measured by
``scripts/benchmark.py``.)

The hand-made traces are tiny Chrome traces whose split is known by
construction (times in microseconds). The real traces live in
``../shared/traces`` beside the repository (HTA's own test data, MIT); the
tests that need them skip when that folder is absent.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

import kineto_traces as K
from labkit.measure import profiling as P

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT.parent / "shared" / "traces"
ALLTOALL = TRACES / "gpu-a100-8rank-alltoall"
SAMPLED = TRACES / "gpu-128rank-sampled"
needs_traces = pytest.mark.skipif(
    not ALLTOALL.is_dir() or not SAMPLED.is_dir(),
    reason=f"real GPU traces not found in {TRACES} (a sibling folder "
    "'shared/traces' of the repository)")


def ev(name, ts, dur, cat="cpu_op", tid=1, pid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
            "ts": ts, "dur": dur, "args": args}


def write(tmp_path, events, name="rank-0.json", **top):
    f = tmp_path / name
    f.write_text(json.dumps({"traceEvents": events, **top}))
    return f


# -- CPU traces ---------------------------------------------------------------

def cpu_trace():
    """One 100 us step on the main thread (tid 1), gloo on tids 7 and 8.

    compute   [0,30) with a nested op, [60,70), [95,98)
    data      [30,50): DataLoader __next__ with an op nested in it
    comm      c10d enqueue [52,54) inside an autograd op [50,55);
              gloo:all_reduce on two threads, [53,80) and [75,90)
    idle      the rest
    """
    return [
        ev("ProfilerStep#3", 0, 100, cat="user_annotation"),
        ev("forward", 0, 30, cat="user_annotation"),
        ev("aten::linear", 0, 30), ev("aten::mm", 5, 10),
        ev("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
           30, 20, cat="user_annotation"),
        ev("aten::stack", 35, 5),
        ev("backward", 50, 40, cat="user_annotation"),
        ev("autograd::engine::evaluate_function: AccumulateGrad", 50, 5),
        ev("c10d::allreduce_", 52, 2),
        ev("gloo:all_reduce", 53, 27, cat="user_annotation", tid=7),
        ev("gloo:all_reduce", 75, 15, cat="user_annotation", tid=8),
        ev("aten::mm", 60, 10),
        ev("aten::item", 95, 3),
    ]


def test_cpu_split_known_by_construction(tmp_path):
    f = write(tmp_path, cpu_trace(), distributedInfo={"rank": 0})
    r = P.analyze(f)["ranks"][0]
    assert r["device"] == "cpu" and r["loader"] == "single-process"
    (s,) = r["steps"]
    assert s["step"] == 3 and s["step_us"] == 100
    # compute: [0,30) + [50,52) + [54,55) + [60,70) + [95,98)
    assert s["compute_us"] == 30 + 2 + 1 + 10 + 3
    assert s["data_us"] == 20
    # comm [52,90) less compute [54,55) and [60,70): 38 - 11
    assert s["communication_us"] == 27
    assert s["other_us"] == 0
    assert s["idle_us"] == 100 - 46 - 20 - 27
    assert s["comm_total_us"] == 38
    assert s["overlap_us"] == 11                 # [54,55) + [60,70)
    assert s["overlap_pct"] == pytest.approx(100 * 11 / 38)
    assert s["collectives"] == 2                 # the gloo ops, not c10d
    assert s["items"] == 1
    assert s["phases_us"] == {"forward": 30, "backward": 40}
    # comm outside backward [50,90): none
    assert s["exposed_comm_outside_backward_us"] == 0


def test_steps_sum_to_the_total_and_threads_count_once(tmp_path):
    a = cpu_trace()
    b = [dict(e, ts=e["ts"] + 100) for e in cpu_trace()]
    b[0] = dict(b[0], name="ProfilerStep#4")
    r = P.analyze(write(tmp_path, a + b))["ranks"][0]
    assert [s["step"] for s in r["steps"]] == [3, 4]
    tot = r["total"]
    assert tot["step_us"] == 200
    assert sum(tot[f"{k}_us"] for k in P.KINDS) == pytest.approx(200)
    assert tot["communication_us"] == 54 and tot["compute_pct"] == 46


def test_rank_from_the_file_name(tmp_path):
    write(tmp_path, cpu_trace(), name="rank-1.json")
    assert P.analyze(tmp_path)["ranks"][0]["rank"] == 1


# -- GPU traces ---------------------------------------------------------------

def gpu_trace():
    """Two kept steps; kernels on streams 7 and 20, launched from the CPU.

    step 1 (launched in ProfilerStep#1 [0,100)): kernels
      gemm      s7  [100,140)
      gemm      s20 [120,150)     overlaps the first: counted once
      nccl      s20 [150,200)     compute under it: [160,170)
      elementw  s7  [160,170)
      Memcpy    s7  [210,220)
    step 2 (ProfilerStep#2 [100,200)): kernels
      gemm      s7  [300,350)
    step 3 (ProfilerStep#3 [200,300)): the last, left out
    DataLoader __next__ on the CPU [230,280): the GPU is idle then
    """
    k = []
    launches = []

    def kernel(name, ts, dur, stream, corr, launch_ts, cat="kernel"):
        k.append(ev(name, ts, dur, cat=cat, pid=0, tid=stream,
                    stream=stream, correlation=corr))
        launches.append(ev("cudaLaunchKernel", launch_ts, 2,
                           cat="cuda_runtime", correlation=corr))

    kernel("void gemm_kernel<float>()", 100, 40, 7, 1, 10)
    kernel("void gemm_kernel<float>()", 120, 30, 20, 2, 12)
    kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 150, 50,
           20, 3, 14)
    kernel("void elementwise_kernel()", 160, 10, 7, 4, 16)
    kernel("Memcpy DtoH (Device -> Pageable)", 210, 10, 7, 5, 18,
           cat="gpu_memcpy")
    kernel("void gemm_kernel<float>()", 300, 50, 7, 6, 110)
    cpu = [ev("ProfilerStep#1", 0, 100, cat="user_annotation"),
           ev("ProfilerStep#2", 100, 100, cat="user_annotation"),
           ev("ProfilerStep#3", 200, 100, cat="user_annotation"),
           ev("enumerate(DataLoader)#_MultiProcessingDataLoaderIter"
              ".__next__", 230, 50, cat="user_annotation"),
           ev("cudaStreamSynchronize", 20, 195, cat="cuda_runtime"),
           ev("aten::item", 19, 197)]
    return cpu + launches + k


def test_gpu_split_known_by_construction(tmp_path):
    r = P.analyze(write(tmp_path, gpu_trace()))["ranks"][0]
    assert r["device"] == "gpu" and r["loader"] == "multi-process"
    assert r["view"] == "launch" and r["steps_without_kernels"] == []
    s1, s2 = r["steps"]          # step 3, the last, is left out
    # each step from its first kernel to its last kernel's end
    assert (s1["start_us"], s1["step_us"]) == (100, 120)
    assert (s2["start_us"], s2["step_us"]) == (300, 50)
    assert s1["compute_us"] == 50 + 10          # [100,150) + [160,170)
    assert s1["communication_us"] == 40         # [150,200) less [160,170)
    assert s1["other_us"] == 10                 # the memcpy
    assert s1["idle_us"] == 10 and s1["data_us"] == 0   # [200,210)
    assert s1["overlap_pct"] == pytest.approx(20.0)
    assert s1["collectives"] == 1 and s1["kernels"] == 3
    assert s2["compute_us"] == 50 and s2["idle_us"] == 0
    # the total spans [100,350), the gaps between steps included
    t = r["total"]
    assert t["step_us"] == 250 and t["steps"] == 2
    assert t["compute_us"] == 110 and t["data_us"] == 50    # [230,280)
    assert t["idle_us"] == 250 - 110 - 40 - 10 - 50
    assert t["hta"] == {"idle_time_pctg": 36.0, "compute_time_pctg": 44.0,
                        "non_compute_time_pctg": 20.0,
                        "comp_comm_overlap_pctg": 20.0}
    # the memcpy was launched at 18, long before: not host-bound idle
    assert s1["idle_after_sync_us"] == 0 and s1["idle_launch_us"] == 0


def test_a_lagging_gpu_splits_by_launch_not_by_cpu_window(tmp_path):
    """The GPU runs 900 us behind: in the CPU's window of step 1 it is
    idle 90% of the time, though step 1's own kernels run back to back."""
    f = K.write(tmp_path, 0, K.lagging_gpu())
    launch = P.breakdown(P.read(f))
    assert [s["step"] for s in launch["steps"]] == [1, 2, 3]
    for s in launch["steps"]:
        assert (s["step_us"], s["compute_us"], s["idle_us"]) == (800, 800, 0)
    assert launch["total"]["step_us"] == 2800      # [900, 3700)
    assert launch["total"]["idle_us"] == 400       # between the steps
    window = P.breakdown(P.read(f), view="cpu-window")
    assert window["view"] == "cpu-window"
    w = window["steps"]
    assert [s["step"] for s in w] == [1, 2, 3, 4]
    assert (w[0]["step_us"], w[0]["compute_us"]) == (1000, 100)
    assert (w[1]["compute_us"], w[1]["idle_us"]) == (800, 200)
    with pytest.raises(ValueError, match="unknown view"):
        P.breakdown(P.read(f), view="gpu")


def test_a_step_without_kernels_is_listed_not_split(tmp_path):
    r = P.analyze(K.write(tmp_path, 0, K.step_without_kernels()))
    r = r["ranks"][0]
    assert [s["step"] for s in r["steps"]] == [1, 3]
    assert r["steps_without_kernels"] == [2]
    # the memset launched before ProfilerStep#1 counts in the total only
    assert r["total"]["step_us"] == 460 - 60
    assert "steps without kernels: 2" in P.table(P.analyze(tmp_path))


# -- bad input ---------------------------------------------------------------

def test_two_traces_of_one_rank(tmp_path):
    write(tmp_path, cpu_trace(), name="a.json", distributedInfo={"rank": 0})
    write(tmp_path, cpu_trace(), name="b.json", distributedInfo={"rank": 0})
    with pytest.raises(ValueError, match="two traces for rank 0"):
        P.analyze(tmp_path)


def test_cli_table_json_and_exit_status(tmp_path):
    write(tmp_path, cpu_trace(), name="rank-0.json")
    cmd = [sys.executable, "-m", "labkit", "profile"]
    r = subprocess.run(cmd + [str(tmp_path), "--json"], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ranks"][0]["steps"][0]["data_us"] == 20
    r = subprocess.run(cmd + [str(tmp_path), "--doctor"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and "triage:" in r.stdout
    assert "CPU time, not GPU time" in r.stdout
    r = subprocess.run(cmd + [str(tmp_path), "--view", "gpu"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "invalid choice" in r.stderr
    r = subprocess.run(cmd + [str(tmp_path / "nope")], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "no such file" in r.stderr


# -- real GPU traces ----------------------------------------------------------

@needs_traces
def test_reads_the_big_trace():
    """1.7 MB compressed, 34 MB of JSON, 109k events, six steps
    (five by launch: the last is left out). How fast
    it is read is a budget, measured by ``scripts/benchmark.py``, not
    asserted here (a timed test fails on a busy machine)."""
    f = ALLTOALL / "rank-3.json.gz"
    assert f.stat().st_size > 1.5e6
    t = P.read(f)
    r = P.breakdown(t)
    assert [s["step"] for s in r["steps"]] == list(range(1009, 1014))
    r = P.breakdown(t, view="cpu-window")
    assert len(r["steps"]) == 6


@needs_traces
def test_the_breakdown_does_not_need_hta():
    code = ("import sys; from labkit.measure import profiling as P; "
            f"P.analyze({str(SAMPLED)!r}); "
            "print('hta' in sys.modules, 'pandas' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]


@needs_traces
def test_parallel_reading_gives_the_same_report():
    one = P.analyze(SAMPLED, jobs=1)
    two = P.analyze(SAMPLED, jobs=2)
    assert one == two and [r["rank"] for r in two["ranks"]] == [0, 1]
