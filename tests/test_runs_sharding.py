"""Counted bytes of real DDP / FSDP steps equal the prediction, exactly."""
import pytest

from labkit.launch import launch
from labkit.predict.sharding import predict_calls, summarize
from labkit.train import reference_losses
from labkit.model import GPTConfig

pytestmark = pytest.mark.distributed

STEPS = 3


def _check(res, world_size, shard_group=2):
    ref = reference_losses(GPTConfig(), STEPS, 8)
    rank0 = res[0]
    for run in rank0["runs"]:
        s = run["strategy"]
        version = 1 if s.startswith("fsdp1") else 2
        pred = summarize(predict_calls(
            rank0["unit_shapes"], world_size, s, shard_group=shard_group,
            version=version, bucket_cap_mb=run["bucket_cap_mb"]))
        assert run["per_step"][-1] == pred, s       # steady step, exact
        assert run["losses"] == pytest.approx(ref, rel=1e-5), s
    # every rank counts the same calls
    for other in res[1:]:
        assert [r["per_step"][-1] for r in other["runs"]] == [
            r["per_step"][-1] for r in rank0["runs"]]


def test_two_ranks_ddp_full_shard_shard_grad_op(tmp_path):
    res = launch("labkit.runs.sharding", 2, {
        "strategies": "ddp,fsdp1_full_shard,fsdp1_shard_grad_op,"
                      "fsdp2_full,fsdp2_grad_op",
        "steps": STEPS, "bucket_caps": "0.1"}, timeout=240,
        run_dir=tmp_path / "run")
    _check(res, 2)
    runs = {r["strategy"]: r for r in res[0]["runs"]}
    phi = 4 * res[0]["params"]
    assert runs["ddp"]["per_step"][-1]["all_reduce"]["bytes"] == phi
    assert runs["fsdp2_full"]["per_step"][-1]["all_gather"]["bytes"] == \
        2 * phi
    # DDP's second step broadcasts its rebuilt bucket order; the third
    # does not
    assert "broadcast" in runs["ddp"]["per_step"][1]
    assert "broadcast" not in runs["ddp"]["per_step"][2]
    b = res[0]["buckets"][0]
    sizes = [r["bytes"] for r in b["records"]]
    assert sizes == b["rebuilt_bucket_sizes"] and len(sizes) == 4
    assert sizes == [c["bytes"] for c in predict_calls(
        res[0]["unit_shapes"], 2, "ddp", bucket_cap_mb=0.1)]


def test_four_ranks_with_hybrid_shard(tmp_path):
    res = launch("labkit.runs.sharding", 4, {
        "strategies": "ddp,fsdp1_full_shard,fsdp1_shard_grad_op,"
                      "fsdp1_hybrid_shard",
        "steps": STEPS, "shard_group": 2}, timeout=300,
        run_dir=tmp_path / "run")
    _check(res, 4)
    hyb = res[0]["runs"][-1]
    groups = {(r["op"], tuple(r["ranks"])) for r in hyb["records"]}
    # rank 0 all-gathers and reduce-scatters with its shard group {0, 1}
    # and all-reduces its gradient shard with its replica {0, 2}
    assert groups == {("all_gather", (0, 1)), ("reduce_scatter", (0, 1)),
                      ("all_reduce", (0, 2))}


def test_padding_is_predicted(tmp_path):
    # vocab 255 and seq 30 do not divide by 4: FSDP2 pads those parameters'
    # rows, FSDP1 its flat parameters; the prediction pads the same way
    res = launch("labkit.runs.sharding", 4, {
        "strategies": "fsdp2_full,fsdp1_full_shard", "steps": 1,
        "vocab": 255, "seq": 30}, timeout=240, run_dir=tmp_path / "run")
    rank0 = res[0]
    for run in rank0["runs"]:
        s = run["strategy"]
        pred = predict_calls(rank0["unit_shapes"], 4, s,
                             version=1 if s.startswith("fsdp1") else 2)
        assert run["per_step"][-1] == summarize(pred), s
    fsdp2 = rank0["runs"][0]["per_step"][-1]["all_gather"]["bytes"]
    assert fsdp2 > 2 * 4 * rank0["params"]          # padded rows
