"""Provenance: what every record carries, and the stamp of a lab page."""
import json

from labkit.results import provenance
from labkit.lab import Results


def test_collect_has_every_fact():
    p = provenance.collect("cpu", preflight={"status": "ok"})
    for key in ("device", "gpu_count", "gpu_model", "torch", "cuda", "nccl",
                "deepspeed", "profile", "date", "commit", "preflight"):
        assert key in p
    assert p["profile"] == "cpu" and p["preflight"] == {"status": "ok"}
    assert p["commit"] and p["deepspeed"]


def test_every_saved_record_carries_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_PREFLIGHT", json.dumps({"status": "warn"}))
    res = Results("x", profile="cpu", results_dir=tmp_path)
    res.add("q", "s", 2, 1.0, 1.0, "bytes")
    recs = json.loads(res.save().read_text())
    assert recs[0]["provenance"]["preflight"] == {"status": "warn"}
    assert "provenance" not in res.frame().columns


def test_stamps():
    cpu = {"device": "cpu: x86_64, 2 cores", "gpu_count": 0, "torch": "2.13.0",
           "date": "2026-11-30T12:00:00+00:00", "commit": "abc",
           "profile": "cpu"}
    assert provenance.stamp(cpu, 4).startswith("CPU profile (gloo, 4 processes)")
    gpu = {**cpu, "gpu_count": 8, "gpu_model": "NVIDIA H100 80GB HBM3",
           "cuda": "12.8", "nccl": "2.27.3", "profile": "gpu8"}
    s = provenance.stamp(gpu, 8)
    assert s.startswith("Measured on 8\u00d7 NVIDIA H100 80GB HBM3, torch 2.13.0,"
                        " 2026-11-30, commit abc")
    # a GPU profile run without GPUs is never stamped as measured on GPUs
    assert provenance.stamp({**gpu, "gpu_count": 0}, 8).startswith("CPU")
    assert "Not run" in provenance.stamp(None)


def test_stamps_in_chinese_keep_every_value():
    """The same record said in Chinese (book/_ext/lab_stamp.py): the
    values are the English stamp's, the words are not."""
    cpu = {"device": "cpu: x86_64, 2 cores", "gpu_count": 0,
           "torch": "2.13.0", "date": "2026-11-30T12:00:00+00:00",
           "commit": None, "profile": "cpu"}
    zh = provenance.stamp(cpu, 4, "zh")
    assert zh == ("CPU profile（gloo，4 个进程）：cpu: x86_64, 2 cores，torch "
                  "2.13.0，2026-11-30，提交 未知（profile cpu）。")
    gpu = {**cpu, "gpu_count": 8, "gpu_model": "NVIDIA H100 80GB HBM3",
           "cuda": "12.8", "nccl": "2.27.3", "profile": "gpu8",
           "commit": "abc"}
    assert provenance.stamp(gpu, 8, "zh").startswith(
        "测量于 8\u00d7 NVIDIA H100 80GB HBM3，torch 2.13.0，2026-11-30，"
        "提交 abc，CUDA 12.8，NCCL 2.27.3")
    assert provenance.stamp(None, lang="zh").startswith("本次构建未运行")
    assert set(provenance.STAMP["en"]) == set(provenance.STAMP["zh"])


def test_record_is_what_the_stamp_says():
    prov = provenance.collect("cpu")
    rec = provenance.record(prov, 2)
    assert json.loads(json.dumps(rec)) == rec
    assert set(rec) == {*provenance.STAMPED, "world_size"}
    assert provenance.stamp(rec, rec["world_size"]) == \
        provenance.stamp(prov, 2)
    assert provenance.record(None) == {}
