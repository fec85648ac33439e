"""Communication volume per strategy against the ZeRO and FSDP papers."""
import json
import subprocess
import sys

import pytest

from labkit.predict import sharding as S

PSI = 7.5e9  # the ZeRO paper's 7.5B example


def sent(strategy, gpus=64, **kw):
    return S.volume(PSI, gpus, strategy, param_bytes=1, **kw)


@pytest.mark.parametrize("strategy", ["ddp", "no_shard"])
def test_ddp_is_2_psi(strategy):
    # Rajbhandari et al. 2020, Sec. 7.1: all-reduce = reduce-scatter +
    # all-gather, 2 Psi per data-parallel process
    v = sent(strategy)
    assert v["units_of_phi"] == 2
    assert v["sent_bytes"] == pytest.approx(2 * PSI * 63 / 64)


@pytest.mark.parametrize("strategy", ["zero1", "zero2", "shard_grad_op"])
def test_zero1_zero2_are_2_psi(strategy):
    # ZeRO Sec. 7.2.1: P_os+g "incurs no additional communication", 2 Psi
    assert sent(strategy)["units_of_phi"] == 2
    assert sent(strategy)["sent_bytes"] == pytest.approx(sent("ddp")
                                                         ["sent_bytes"])


@pytest.mark.parametrize("strategy", ["zero3", "full_shard"])
def test_zero3_is_3_psi_1_5x(strategy):
    # ZeRO Sec. 7.2.2: P_os+g+p: 3 Psi, 1.5x data parallelism
    v = sent(strategy)
    assert v["units_of_phi"] == 3
    assert v["sent_bytes"] / sent("ddp")["sent_bytes"] == pytest.approx(1.5)
    assert v["by_op"]["all_gather"]["bytes"] == 2 * PSI
    assert v["by_op"]["reduce_scatter"]["bytes"] == PSI


def test_units_count_elements_not_bytes():
    # DDP under autocast reduces fp32 grads beside bf16 weights: still 2
    v = S.volume(PSI, 8, "ddp", param_bytes=2, grad_bytes=4)
    assert v["units_of_phi"] == 2 and v["logical_bytes"] == 4 * PSI


def test_hybrid_shard_cross_host_traffic():
    # Zhao et al. 2023, Sec. 3.2.2: all-gathers and reduce-scatter stay in
    # the shard group (one host of G GPUs); across the W hosts only the
    # all-reduce of each rank's gradient shard M/G: 2 M (W-1) / (G W)
    W, G, M = 8, 8, PSI
    v = sent("hybrid_shard", gpus=W * G, gpus_per_node=G)
    assert v["inter_node_sent_bytes"] == pytest.approx(2 * M * (W - 1)
                                                       / (G * W))
    assert v["intra_node_sent_bytes"] == pytest.approx(3 * M * (G - 1) / G)
    # FULL_SHARD over all 64 GPUs sends everything across hosts
    full = sent("full_shard", gpus=W * G, gpus_per_node=G)
    assert full["intra_node_sent_bytes"] == 0
    assert full["inter_node_sent_bytes"] / v["inter_node_sent_bytes"] > 10
    # on one node hybrid is FULL_SHARD (one replica, no all-reduce)
    one = sent("hybrid_shard", gpus=8, gpus_per_node=8)
    assert one["units_of_phi"] == 3 and "all_reduce" not in one["by_op"]


def test_overlap_check():
    # 7B on 8 H100 (NVLink4), 16k tokens per GPU: ZeRO-3's 1.5x bytes hide
    big = S.overlap(7e9, 8, "zero3", tokens_per_gpu=16384)
    assert big["hidden_fraction"] == 1 and big["scaling_efficiency"] == 1
    # a tiny batch over Ethernet leaves communication exposed
    small = S.overlap(7e9, 16, "zero3", tokens_per_gpu=256,
                      inter_link="eth-100g")
    assert small["exposed_s"] > 0 and small["scaling_efficiency"] < 0.5
    # ZeRO-1/2's all-gather after the optimizer step never hides
    z2 = S.overlap(7e9, 8, "zero2", tokens_per_gpu=16384)
    assert z2["by_phase"]["step"]["exposed_s"] > 0


def test_fsdp_padding():
    # FSDP2 pads every parameter's dim 0 to a multiple of N
    assert S.fsdp_unit_numel([[10, 3], [5]], 4, version=2) == 12 * 3 + 8
    # FSDP1 pads the flat parameter to a multiple of N
    assert S.fsdp_unit_numel([[10, 3], [5]], 4, version=1) == 36
    # ... with 16-byte alignment of each parameter (use_orig_params=True)
    assert S.fsdp_unit_numel([[3], [5]], 2, version=1, align_numel=4) == 10
    assert S.fsdp_unit_numel([[64, 64], [64]], 4, version=2) == 64 * 65


def test_ddp_buckets_greedy():
    mib = 1024 * 1024
    assert S.ddp_buckets([mib // 2] * 4, 1) == [mib, mib]
    assert S.ddp_buckets([3 * mib, 10], 1) == [3 * mib, 10]
    # the default: a 1 MiB first bucket, then 25 MiB
    assert S.ddp_buckets([mib] * 30) == [mib, 25 * mib, 4 * mib]


def test_predict_calls_tiny_gpt_shapes():
    units = [[[8, 4]], [[4, 4], [4]], [[8, 4]]]
    n = sum(a * b for a, b in ([8, 4], [4, 4], [8, 4])) + 4
    full = S.summarize(S.predict_calls(units, 2, "full_shard"))
    assert full["all_gather"] == {"calls": 6, "bytes": 2 * 4 * n}
    assert full["reduce_scatter"] == {"calls": 3, "bytes": 4 * n}
    grad_op = S.summarize(S.predict_calls(units, 2, "fsdp2_grad_op"))
    assert grad_op["all_gather"]["calls"] == 3
    hyb = S.summarize(S.predict_calls(units, 4, "hybrid_shard",
                                      shard_group=2))
    assert hyb["all_reduce"] == {"calls": 3, "bytes": 4 * n // 2}
    ddp = S.summarize(S.predict_calls(units, 2, "ddp", bucket_cap_mb=25))
    assert ddp == {"all_reduce": {"calls": 1, "bytes": 4 * n}}


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "labkit", "comm", *args],
                          capture_output=True, text=True, timeout=60)


def test_cli_json():
    r = _cli("--params", "7e9", "--gpus", "8", "--strategy", "zero3",
             "--json")
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)
    assert v["units_of_phi"] == 3
    assert v["by_op"]["all_gather"]["bytes"] == 2 * 7e9 * 2
    assert v["seconds"] > 0 and v["inter_node_sent_bytes"] == 0
    r = _cli("--params", "7e9", "--gpus", "16", "--strategy",
             "hybrid_shard", "--tokens-per-gpu", "4096")
    assert r.returncode == 0 and "between nodes" in r.stdout


@pytest.mark.parametrize("args", [
    ["--params", "7e9", "--strategy", "zero4"],
    ["--params", "-1"],
    ["--params", "7e9", "--gpus", "12"],
    ["--params", "7e9", "--link", "carrier-pigeon"],
    ["--params", "7e9", "--gpus", "0"],
])
def test_cli_bad_input_exit_2(args):
    r = _cli(*args)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1


def test_node_split_of_hybrid_shard():
    """Shard group = one node: all-gathers and reduce-scatters stay inside,
    only the gradient shard's all-reduce (Phi/F per rank) crosses nodes."""
    from labkit.predict.sharding import node_of_rank, node_split
    units = [[[64, 64], [64]], [[256, 64]]]
    psi = 64 * 64 + 64 + 256 * 64
    node_of = node_of_rank(8, 4)
    assert node_of == [0] * 4 + [1] * 4
    for rank in (0, 5):
        calls = S.predict_calls(units, 8, "hybrid_shard", shard_group=4,
                              rank=rank)
        shard = [c["ranks"] for c in calls if c["op"] == "all_gather"][0]
        assert shard == list(range(rank - rank % 4, rank - rank % 4 + 4))
        split = node_split(calls, node_of)
        assert split["across"] == 4 * psi // 4           # Phi / F, fp32
        assert split["inside"] == 3 * 4 * psi            # 3 Phi
    # DDP over both nodes: everything crosses
    ddp = S.predict_calls(units, 8, "ddp")
    assert node_split(ddp, node_of) == {"inside": 0, "across": 4 * psi}
    with pytest.raises(ValueError, match="do not fill nodes"):
        node_of_rank(6, 4)
