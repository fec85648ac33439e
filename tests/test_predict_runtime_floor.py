"""The runtime floor: named defaults, each overridable, in bytes."""
import pytest

from labkit.predict.memory.floor import (DEFAULTS, MIB, floor,
                                         headroom_sentence)


def test_defaults_and_peers():
    one = dict((n, b) for n, b, _ in floor(1)["terms"])
    assert one["cuda context"] == 0.5e9 and one["nccl buffers"] == 0
    eight = dict((n, b) for n, b, _ in floor(8)["terms"])
    # 2 directions x 16 channels x 4 MiB x 2 ring neighbours
    assert eight["nccl buffers"] == 2 * 16 * 4 * MIB * 2
    a2a = dict((n, b) for n, b, _ in floor(8, peers=7)["terms"])
    assert a2a["nccl buffers"] == 2 * 16 * 4 * MIB * 7
    assert set(DEFAULTS) >= {"cuda_context_gb", "nccl_buffsize", "slack"}


def test_overrides_and_slack():
    f = floor(8, allocated=40e9, cuda_context_gb=1.0, slack=0.1)
    t = dict((n, b) for n, b, _ in f["terms"])
    assert t["cuda context"] == 1e9 and t["allocator slack"] == 4e9
    assert f["total"] == sum(t.values())
    assert all(src for _, _, src in f["terms"])


@pytest.mark.parametrize("kw", [dict(slack=2), dict(slack=float("nan")),
                                dict(cuda_context_gb=-1),
                                dict(nccl_channels="lots"),
                                dict(bogus=1)])
def test_bad_values_are_one_line(kw):
    with pytest.raises(ValueError) as e:
        floor(8, **kw)
    assert "\n" not in str(e.value)


def test_headroom_is_a_sentence():
    assert headroom_sentence(67.6e9, 80e9) == \
        "fits with 12.40 GB headroom per GPU"
    assert headroom_sentence(83.1e9, 80e9) == \
        "does not fit: 3.10 GB over per GPU"


def test_the_job_suggests_what_fits_with_the_floor():
    """70B on 8 x 80 GB: the ledger alone says 14 GPUs (16 Psi / 14 = 80
    GB exactly), but the floor leaves nothing there: 15 with it."""
    from labkit.predict.memory.job import job
    j = job(70e9, 8, "zero3", gpu_mem=80e9)
    assert not j["fits"] and j["smallest_gpus"] == 15
    assert j["offload_that_fits"] == "optimizer"
    assert job(70e9, 15, "zero3", gpu_mem=80e9)["fits"]
    assert not job(70e9, 14, "zero3", gpu_mem=80e9)["fits"]
    assert j["sentence"].startswith("does not fit:")


def test_an_all_to_all_has_a_term_of_its_own():
    # a mixture of experts' dispatch: 2 directions x 2 channels per peer
    # (NCCL_NCHANNELS_PER_NET_PEER) x 4 MiB x the 7 other EP ranks
    t = dict((n, b) for n, b, _ in floor(8, a2a_peers=7)["terms"])
    assert t["nccl all-to-all buffers"] == 2 * 2 * 4 * MIB * 7
    assert t["nccl buffers"] == 2 * 16 * 4 * MIB * 2
    four = floor(8, a2a_peers=7, nccl_p2p_channels=4)
    assert dict((n, b) for n, b, _ in four["terms"])[
        "nccl all-to-all buffers"] == 2 * 4 * 4 * MIB * 7
    assert "nccl all-to-all buffers" not in [n for n, _, _ in
                                             floor(8)["terms"]]
