"""The slow run on 2 gloo ranks: the injected data delay shows up as data
time of the right size, workers remove it, tiny buckets give one
all-reduce per tensor, and the losses equal a single-process reference."""
import pytest
import torch

from labkit.nn import model as gpt
from labkit.launch import launch
from labkit.measure.trace import doctor
from labkit.measure import profiling
from labkit.runs.profiling import SlowDataset, configs
from labkit.training.train import make_optimizer

pytestmark = pytest.mark.distributed

DELAY_MS, BATCH, WS = 3.0, 4, 2


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("profiling")
    res = launch("labkit.runs.profiling", WS, {
        "configs": "slow,w2", "out": tmp / "traces", "delay_ms": DELAY_MS,
        "batch": BATCH, "active": 3}, timeout=240, run_dir=tmp / "run")
    reports = {n: profiling.analyze(c["trace_dir"])
               for n, c in res[0]["configs"].items()}
    return res, reports


def test_injected_delay_is_measured_as_data_time(run):
    res, reports = run
    predicted_ms = BATCH * DELAY_MS                    # num_workers=0
    assert res[0]["configs"]["slow"]["predicted_data_ms"] == predicted_ms
    for r in reports["slow"]["ranks"]:
        assert len(r["steps"]) == 3 and r["loader"] == "single-process"
        for s in r["steps"]:
            measured_ms = s["data_us"] / 1e3
            # sleep never returns early; collate and a busy machine add,
            # so the upper side is loose: "the right size", not a timing
            assert 0.97 * predicted_ms <= measured_ms <= (
                2.0 * predicted_ms + 10.0), measured_ms


def test_workers_take_the_wait_off_the_training_process(run):
    _, reports = run
    slow = profiling.mean_step(reports["slow"])["data"]
    fixed = profiling.mean_step(reports["w2"])["data"]
    assert reports["w2"]["ranks"][0]["loader"] == "multi-process"
    # Workers take the injected delay (BATCH x DELAY_MS per step) off
    # the training process, but two workers still need that long to make
    # each batch: they hide all of it only if a step computes for at
    # least half of it, which this tiny model does not always do, and a
    # worker's batch costs IPC that an in-process one does not. So at
    # least a quarter of the injected delay must go: runs measured 17.07
    # -> 9.02 ms (3.13, loaded machine) and 14.00 -> 9.07 ms (3.11 CI),
    # removing 8.05 and 4.93 ms of the injected 12.
    assert slow - fixed >= 0.25 * BATCH * DELAY_MS, (fixed, slow)


def test_tiny_buckets_give_one_all_reduce_per_tensor(run):
    res, reports = run
    slow = res[0]["configs"]["slow"]
    buckets = doctor.ddp_buckets(slow["param_bytes"], slow["bucket_cap_mb"])
    assert len(buckets) == len(slow["param_bytes"])
    for r in reports["slow"]["ranks"]:   # + 1: the loss logged every step
        assert {s["collectives"] for s in r["steps"]} == {len(buckets) + 1}
    fixed = res[0]["configs"]["w2"]
    assert len(doctor.ddp_buckets(fixed["param_bytes"],
                                  fixed["bucket_cap_mb"])) == 1
    for r in reports["w2"]["ranks"]:
        assert {s["collectives"] for s in r["steps"]} == {1}


def test_losses_equal_a_single_process_reference(run):
    """DDP averages gradients of equal local batches, so it trains like
    one process on the global batch (DistributedSampler, no shuffle:
    rank r reads samples r, r + 2, r + 4, ...)."""
    res, _ = run
    c = gpt.GPTConfig()
    steps = len(res[0]["configs"]["slow"]["losses"])
    ds = SlowDataset(c, steps * BATCH * WS, 0.0)
    m = gpt.build(c, seed=0)
    opt = make_optimizer(m)
    ref = []
    for s in range(steps):
        idx = [r + WS * (s * BATCH + k) for r in range(WS)
               for k in range(BATCH)]
        x = torch.stack([ds[i][0] for i in idx])
        y = torch.stack([ds[i][1] for i in idx])
        loss = m(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        ref.append(loss.item())
    for rank in res:
        for name, cfg in rank["configs"].items():
            assert cfg["losses"] == pytest.approx(ref, abs=2e-5), name


def test_unknown_configuration_is_refused_before_launch():
    with pytest.raises(ValueError, match="unknown configuration"):
        configs(["slow", "fast"], workers=2)
    with pytest.raises(ValueError, match="prefetch_factor"):
        configs(["w0p2"], workers=2)
    assert [c.num_workers for c in configs(["w4", "w1p4"], 2)] == [4, 1]
