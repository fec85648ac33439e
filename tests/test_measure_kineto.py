"""Reading Kineto traces: clear errors on bad input, and HTA's reading rules
(rounding, the last step left out, a kernel's step) by construction."""
import gc
import gzip
import json

import pytest

import kineto_traces as K
from kineto_traces import ev
from labkit.measure.trace import kineto


def cpu_trace():
    return [ev("ProfilerStep#3", 0, 100, cat="user_annotation"),
            ev("aten::mm", 5, 10)]


def read_all(path):
    return [kineto.read(f) for f in kineto.trace_files(path)]


def test_bad_input_gets_a_clear_one_line_error(tmp_path):
    cases = {}
    cases["no such file"] = tmp_path / "nope"
    (tmp_path / "empty").mkdir()
    cases["no trace files"] = tmp_path / "empty"
    (tmp_path / "e.json").write_text("")
    cases["is empty"] = tmp_path / "e.json"
    (tmp_path / "x.json").write_text('{"rank": 0, "loss": [1.0]}')
    cases["not a Chrome trace"] = tmp_path / "x.json"
    good = json.dumps({"traceEvents": cpu_trace()}).encode()
    (tmp_path / "t.json").write_bytes(good[: len(good) // 2])
    cases["not valid JSON"] = tmp_path / "t.json"
    packed = gzip.compress(good)
    (tmp_path / "t.json.gz").write_bytes(packed[: len(packed) // 2])
    cases["truncated or damaged gzip"] = tmp_path / "t.json.gz"
    (tmp_path / "s.json").write_text(json.dumps(
        {"traceEvents": cpu_trace()[1:]}))
    cases["no ProfilerStep"] = tmp_path / "s.json"
    for words, path in cases.items():
        with pytest.raises(ValueError) as e:
            read_all(path)
        msg = str(e.value)
        assert "\n" not in msg and str(path.name) in msg, msg
        assert words in msg, (words, msg)


def test_reading_leaves_the_garbage_collector_as_it_was(tmp_path):
    """Parsing pauses the collector (it took two thirds of the time on
    big traces) and must give it back, after an error too."""
    good = K.write(tmp_path, 0, cpu_trace())
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            kineto.read(good)
            with pytest.raises(ValueError):
                kineto.read(bad)
            assert gc.isenabled() is enabled
        finally:
            gc.enable()


def test_rank_from_distributed_info_or_the_file_name(tmp_path):
    assert kineto.read(K.write(tmp_path, 3, cpu_trace())).rank == 3
    f = tmp_path / "trace_rank_5.json"
    f.write_text(json.dumps({"traceEvents": cpu_trace()}))
    assert kineto.read(f).rank == 5


def test_the_last_step_is_left_out_and_earlier_launches_kept(tmp_path):
    """_filter_irrelevant_gpu_kernels: launched before the last step's
    start; add_iteration: the step whose range holds the launch."""
    t = kineto.read(K.write(tmp_path, 0, K.step_without_kernels()))
    assert t.device == "gpu"
    assert [(s, e, n) for s, e, _, n in t.kernels] == [
        (60, 65, None), (150, 210, 1), (400, 460, 3)]
    assert t.steps == [(1, 150, 210), (3, 400, 460)]
    assert t.empty_steps == [2]
    assert t.cpu_steps[4] == (400, 500)        # still read, for the CPU


def test_one_step_name_keeps_every_kernel(tmp_path):
    events = K.kineto([(1, 0, 50)], [(K.GEMM, 60, 10, 7, 10),
                                     (K.GEMM, 80, 10, 7, 70)])
    t = kineto.read(K.write(tmp_path, 0, events))
    assert [n for *_, n in t.kernels] == [1, None]


def test_fractional_time_stamps_are_rounded_like_hta(tmp_path):
    """round_down_time_stamps: [ceil(ts), floor(ts + dur)) once any time
    stamp is fractional; integer traces stay as they are."""
    t = kineto.read(K.write(tmp_path, 0, K.nanoseconds()))
    got = {(s, e) for s, e, _, _ in t.kernels}
    assert {(101, 150), (161, 160), (171, 170), (181, 200)} <= got
    assert t.cpu_steps[1] == (1, 99)
    integers = K.kineto([(1, 0, 50), (2, 50, 50)], [
        (K.GEMM, 60, 0.5, 7, 10)])
    t = kineto.read(K.write(tmp_path / "int", 0, integers))
    assert [(s, e) for s, e, _, _ in t.kernels] == [(60, 60.5)]


def test_what_counts_as_a_kernel(tmp_path):
    """GPUKernelFilter: a stream and a correlation >= 0, whatever the
    category (a Stream Sync is one; an Event Sync on stream -1 is not
    split); a CPU event on a stream is split too, if it starts before the
    last ProfilerStep -- here the GPU's annotation of step 1, at 60."""
    events = K.kineto([(1, 0, 50), (2, 50, 50)], [(K.GEMM, 60, 10, 7, 10)])
    events += [ev("Stream Sync", 70, 5, cat="cuda_sync", pid=0, tid=7,
                  stream=7, correlation=99),
               ev("cudaStreamSynchronize", 20, 60, cat="cuda_runtime",
                  correlation=99),
               ev("Event Sync", 75, 5, cat="cuda_sync", stream=-1,
                  correlation=98),
               ev("ProfilerStep#1", 60, 10, cat="gpu_user_annotation",
                  pid=0, tid=7),
               ev("marker", 40, 2, cat="gpu_op", stream="7"),
               ev("marker", 80, 2, cat="gpu_op", stream="7")]
    t = kineto.read(K.write(tmp_path, 0, events))
    assert sorted(t.kernels) == [(40, 42, "COMPUTATION", None),
                                 (60, 70, "COMPUTATION", 1),
                                 (70, 75, "OTHER", 1)]
    assert t.cpu_steps == {1: (0, 50), 2: (50, 100)}
