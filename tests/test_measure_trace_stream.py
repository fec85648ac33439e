"""labkit.measure.trace.stream: a trace read in pieces gives the same
Trace as the whole file parsed at once, whatever the piece size; broken
files are one line."""
import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from labkit.measure.trace import kineto, stream as trace_stream

ROOT = Path(__file__).resolve().parent.parent
REAL = next((d / "traces" / "gpu-a100-8rank-alltoall" / "rank-3.json.gz"
             for d in (ROOT.parent / "shared", ROOT.parent.parent / "shared")
             if (d / "traces").is_dir()), None)
SMALL = {"schemaVersion": 1, "distributedInfo": {"rank": 5},
         "traceEvents": [
             {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10,
              "dur": 5, "pid": 1, "tid": 1, "args": {}},
             {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1",
              "ts": 0, "dur": 100, "pid": 1, "tid": 1},
             {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_",
              "ts": 20.5, "dur": 1e1, "pid": 1, "tid": 1, "args": None},
             {"ph": "M", "name": "process_name", "pid": 1, "args": {
                 "name": "x \u00e9 \"quoted\" [brackets] {braces}"}}],
         "trailer": [1, 2, {"a": "b"}]}


def _same(a, b):
    assert dataclasses.asdict(a) == dataclasses.asdict(b)


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
@pytest.mark.parametrize("gz", [False, True])
def test_any_piece_size_reads_the_same(tmp_path, monkeypatch, chunk, gz):
    text = json.dumps(SMALL).encode()
    f = tmp_path / ("rank-0.json.gz" if gz else "rank-0.json")
    f.write_bytes(gzip.compress(text) if gz else text)
    monkeypatch.setattr(trace_stream, "CHUNK", chunk)
    meta, events = trace_stream.open_trace(f)
    assert list(events) == SMALL["traceEvents"]
    assert meta == {k: v for k, v in SMALL.items() if k != "traceEvents"}
    _same(kineto.read(f), kineto.read(f, kineto.load(f)))
    assert kineto.read(f).rank == 5


def test_the_bare_array_form(tmp_path):
    f = tmp_path / "t.json"
    f.write_text(json.dumps(SMALL["traceEvents"]))
    assert list(trace_stream.open_trace(f)[1]) == SMALL["traceEvents"]


@pytest.mark.skipif(REAL is None, reason="no ../shared/traces")
def test_a_real_trace_in_small_pieces(monkeypatch):
    whole = kineto.read(REAL, kineto.load(REAL))
    monkeypatch.setattr(trace_stream, "CHUNK", 4093)
    _same(kineto.read(REAL), whole)


BROKEN = {"cut_in_events": json.dumps(SMALL)[:150],
          "cut_after_events": json.dumps(SMALL)[:-30],
          "no_events": '{"schemaVersion": 1}', "events_not_list":
          '{"traceEvents": 5}', "garbage_inside":
          '{"traceEvents": [{"a": 1} {"b": 2}]}', "number": "42",
          "key_not_string": '{1: 2}', "blank": "   \n"}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_files_are_one_line(kind, tmp_path):
    f = tmp_path / "t.json"
    f.write_text(BROKEN[kind])
    with pytest.raises(ValueError) as e:
        list(trace_stream.open_trace(f)[1])
    assert str(f) in str(e.value) and "\n" not in str(e.value)


def test_a_truncated_gzip_is_one_line(tmp_path):
    f = tmp_path / "t.json.gz"
    f.write_bytes(gzip.compress(json.dumps(SMALL).encode() * 50)[:60])
    with pytest.raises(ValueError, match="truncated or damaged gzip"):
        list(trace_stream.open_trace(f)[1])


def test_a_gzip_that_inflates_too_far_is_refused(tmp_path):
    """A 4 MB gzip of a 4 GB trace: refused once it passes 100 times its
    size (the work bound), in seconds, by both readers."""
    f = tmp_path / "bomb.json.gz"
    with gzip.open(f, "wb", compresslevel=9) as g:
        g.write(b'{"traceEvents": [')
        for _ in range(64):
            g.write(b" " * (1 << 24))      # 1 GiB in all
        g.write(b"]}")
    limit = trace_stream.inflate_limit(f.stat().st_size)
    assert limit < 1 << 30
    with pytest.raises(ValueError, match="inflates to more than"):
        meta, events = trace_stream.open_trace(f)
        list(events)
    with pytest.raises(ValueError, match="inflates to more than"):
        trace_stream.load(f)
