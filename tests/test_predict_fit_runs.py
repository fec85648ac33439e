"""Lab 12's runs, one memory model: preflight and the rehearsal judge the
same list with the same function (issue 47, item 3), and the host RAM of
a node that builds the 7B model on meta (item 4). Pure: no fake tensor
runs here (tests/test_rehearse.py holds the counted peaks to these)."""
from __future__ import annotations

import pytest

from labkit.preflight import load_profile
from labkit.preflight.memory import lab_needs
from labkit.predict import fit as F
from labkit.predict.fit_runs import OOM_CELL, host_bytes, runs
from labkit.predict.memory.floor import floor
from labkit.predict.memory.job import MARGIN, on_gpu

GPU8 = load_profile("gpu8")["fit"]
H100 = 80e9


def test_gpu8_runs_fit_with_floor_and_margin_and_ddp_ooms():
    rs = runs(GPU8)
    assert [r.expect_oom for r in rs] == [True, False, False, False]
    for r in rs:
        j = on_gpu(r.allocated["total"], 8, H100)
        fl = floor(8, allocated=r.allocated["total"])["total"]
        assert j["need"] == r.allocated["total"] + fl
        if r.expect_oom:
            assert not j["fits"] and j["need"] > H100   # the gpu cell's OOM
        else:   # at least the floor plus the margin left on 80 GB
            assert j["fits"] and j["headroom"] >= MARGIN * H100, r.variant
    no_sync = next(r for r in rs if r.accumulation_run.endswith("no_sync"))
    assert no_sync.cfg.micro_batch == GPU8["accumulation_micro_batch"] == 1
    # at the chosen micro-batch 2 it would leave no margin (issue 47)
    at2 = {**GPU8, "accumulation_micro_batch": None}
    wide = next(r for r in runs(at2) if r.accumulation_run.endswith(
        "no_sync"))
    assert not on_gpu(wide.allocated["total"], 8, H100)["fits"]


def test_ddp_one_micro_batch_has_no_gradients_at_the_forward_peak():
    """Set to None after each step, DDP's gradients are not there when
    the activations peak; its buckets are (the rehearsal counted 141.7 GB
    where the old sum said 167.6 GB)."""
    m = GPU8["model"]
    one = F.per_rank_bytes(m, 8, OOM_CELL, "fsdp_bf16", "cuda")
    psi, acts = one["params"], one["activations"]
    assert one["total"] == 16 * psi + 4 * psi + max(acts - 4 * psi, 0)
    two = F.per_rank_bytes(m, 8, F.Config("ddp", "none", 1, 2),
                           "fsdp_bf16", "cuda")   # accumulating: all held
    assert two["total"] == 16 * psi + 4 * psi + acts
    assert 140e9 < one["total"] < 142e9


def test_preflight_and_the_rehearsal_give_the_same_bytes():
    """The same run through preflight's function and the rehearsal's:
    preflight prices the prediction, the rehearsal a counted peak; given
    the same peak both say the same need and the same verdict."""
    from labkit.rehearse.labs import lab_plans
    from labkit.rehearse.node import describe
    from labkit.rehearse.run import rehearse_cases
    node = describe("h100x8")
    needs = {n.what.split(" (the gpu")[0]: n
             for n in lab_needs({"fit": GPU8}, node.memory)}
    plan = lab_plans({"fit": GPU8}, node.memory)["fit"]
    zero = {k: 0 for k in ("params", "grads", "optimizer", "activations",
                           "gathered", "other")}
    cache = {c.key: ("fit", c.variant, {**zero,
                                        "params": c.predicted["states"],
                                        "peak": c.predicted["total"]})
             for c in plan.cases}
    rows = rehearse_cases("fit", plan, node, cache=cache)
    assert [r["variant"] for r in rows] == list(needs)
    for row in rows:
        need = needs[row["variant"]]
        assert row["need"] == need.bytes == need.judged["need"]
        assert row["fits"] == need.judged["fits"]
        assert row["expect_oom"] == need.expect_oom
        assert not row["problems"] and not row["warnings"], row


def test_host_ram_per_node_below_64_gb_when_built_on_meta():
    meta, host = host_bytes(GPU8), host_bytes(GPU8, build="host")
    assert meta["model_per_rank"] == 0 and meta["total"] < 64e9
    psi = F.per_rank_bytes(GPU8["model"], 8, OOM_CELL)["params"]
    assert host["model_per_rank"] == 4 * psi       # 8 fp32 copies
    assert host["total"] > 215e9
    with pytest.raises(ValueError, match="build"):
        host_bytes(GPU8, build="disk")


def test_a_measured_rate_must_be_measured_before_the_plan_chooses():
    """The CPU profile's flops_per_s is 'measured' (lab 12 measures it in
    its kernel, the dry run before its cases): the pure plan refuses to
    choose without a number, in one line."""
    cpu = load_profile("cpu")["fit"]
    assert cpu["flops_per_s"] == "measured"
    with pytest.raises(ValueError, match="measured before"):
        runs(cpu)
    assert runs({**cpu, "flops_per_s": 1e10})
