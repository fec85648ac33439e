"""Counted bytes of real DDP / FSDP steps equal the prediction, exactly."""
import pytest

from labkit.launch import LaunchError, launch
from labkit.predict.sharding import predict_calls, summarize
from labkit.training.train import reference_losses
from labkit.nn.model import GPTConfig

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


def _two_nodes(tmp_path, module, args, timeout):
    """Two torchrun agents on this machine, two ranks each, as two nodes
    meeting at a c10d rendezvous on 127.0.0.1. Returns (results, errors,
    run folders) per node."""
    import threading
    from labkit.launch import free_port
    endpoint = f"127.0.0.1:{free_port()}"
    out, errors = [None, None], [None, None]
    dirs = [tmp_path / f"node{i}" for i in range(2)]

    def node(i):
        try:
            out[i] = launch(module, 2, args, timeout=timeout, nnodes=2,
                            node_rank=i, rdzv_endpoint=endpoint,
                            run_dir=dirs[i])
        except Exception as e:  # noqa: BLE001 - the test looks at it
            errors[i] = e
    threads = [threading.Thread(target=node, args=(i,)) for i in range(2)]
    return threads, out, errors, dirs


def test_hybrid_shard_on_two_nodes_splits_bytes_as_predicted(tmp_path):
    from labkit.measure.collectives import split_by_node
    from labkit.predict.sharding import node_of_rank, node_split
    threads, out, errors, _ = _two_nodes(tmp_path, "labkit.runs.sharding", {
        "strategies": "fsdp2_hybrid", "steps": 1,
        "shard_group": 2}, timeout=240)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [None, None], errors
    ranks = sorted(out[0] + out[1], key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    node_of = ranks[0]["node_of_rank"]
    assert node_of == node_of_rank(4, 2)       # ranks numbered node by node
    for rec in ranks:
        for run in rec["runs"]:
            s = run["strategy"]
            pred = node_split(predict_calls(
                rec["unit_shapes"], 4, s, shard_group=2, rank=rec["rank"],
                version=1 if s.startswith("fsdp1") else 2), node_of)
            measured = split_by_node(run["records"], node_of)
            assert measured == pred, (rec["rank"], s)   # ratio 1.000
            assert pred["inside"] > 0 and pred["across"] > 0
            # across nodes: only the gradient shard's all-reduce, Phi/F
            assert pred["across"] == 4 * rec["params"] // 2


def test_killing_one_agent_ends_the_other(tmp_path):
    """Node 0's agent dies (SIGKILL); node 1 fails with a clear error long
    before its timeout, and no process of either node survives."""
    import os
    import signal
    import time
    from test_launch import _leftovers
    timeout = 90
    threads, out, errors, dirs = _two_nodes(
        tmp_path, "labkit.runs.tools.selftest", {"mode": "hang", "bad_rank": 1},
        timeout=timeout)
    t0 = time.monotonic()
    for t in threads:
        t.start()
    agent, hanging = None, False
    while not (agent and hanging) and time.monotonic() - t0 < 60:
        ranks = _leftovers(dirs[0])
        if len(ranks) >= 3:                      # the agent and its 2 ranks
            agent = min(ranks)                   # torchrun: started first
        # rank 1 hangs after an all-reduce of all 4 ranks: both nodes are up
        hanging = any("hanging on purpose" in f.read_text(errors="replace")
                      for d in dirs for f in (d / "logs").glob("**/std*.log"))
        time.sleep(0.5)
    assert agent and hanging, "the two nodes never got going"
    os.kill(agent, signal.SIGKILL)
    for t in threads:
        t.join()
    assert isinstance(errors[1], LaunchError), errors
    # node 1 ended on the dead agent, not at its own timeout (a time bound
    # would hold only on a fast enough machine: the start alone is <= 60 s)
    assert f"timed out after {timeout} s" not in str(errors[1])
    assert "node 1 of 2" in str(errors[1])
    assert "rendezvous 127.0.0.1:" in str(errors[1])
    assert "--- rank" in str(errors[1])          # a failing rank's log
    # gone within the launcher's 10 s promise (test_launch_guard), polled:
    # a fixed 0.5 s sleep held only on a fast enough machine
    t1 = time.monotonic()
    while (_leftovers(dirs[0]) or _leftovers(dirs[1])) and \
            time.monotonic() - t1 < 10:
        time.sleep(0.2)
    assert _leftovers(dirs[0]) == [] and _leftovers(dirs[1]) == []
