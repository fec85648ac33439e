"""The capstone's planner: refusal before launch, the choice, the 7B case."""
import math

import pytest

from labkit.predict import activations as A
from labkit.predict import fit as F
from labkit.predict.sharding.accumulation import step_calls, summary
from labkit.predict.memory import gpt_params

CPU = {"layers": 4, "hidden": 64, "heads": 4, "vocab": 256, "seq": 64}


def test_over_budget_is_refused_with_the_numbers():
    with pytest.raises(ValueError, match="not launched"):
        F.check(CPU, 2, F.Config("ddp", "none", 8, 1), 6e6)
    F.check(CPU, 2, F.Config("fsdp2_full", "selective", 2, 4), 6e6)


def test_choose_picks_the_fastest_that_fits():
    rows = F.plan(CPU, 2, 16, 6e6, 1e10, 1e9)
    best = F.choose(rows)
    assert best["fits"]
    assert all(r["tokens_per_s"] <= best["tokens_per_s"] + 1e-6
               for r in rows if r["fits"])
    with pytest.raises(ValueError, match="no configuration fits"):
        F.choose(F.plan(CPU, 2, 16, 1e5, 1e10, 1e9))


def test_gpu8_7b_ddp_does_not_fit_fsdp_does():
    g = F.GPU8
    m = g["model"]
    psi = gpt_params(m["layers"], m["hidden"], m["heads"], m["vocab"],
                     m["seq"])
    assert 6e9 < psi < 8e9 and 16 * psi > 80e9
    rows = F.plan(m, 8, g["global_batch"], g["budget_bytes"],
                  g["flops_per_s"], g["link_bytes_per_s"],
                  precision="fsdp_bf16", device="cuda")
    assert not any(r["fits"] for r in rows if r["strategy"] == "ddp")
    assert F.choose(rows)["strategy"] == "fsdp2_full"


def test_accumulation_counts():
    units = F.unit_shapes(2, 64, 4, 256, 32)
    one = summary(step_calls(units, 2, "ddp", 1))
    assert summary(step_calls(units, 2, "ddp", 4)) == one
    assert summary(step_calls(units, 2, "ddp", 4, no_sync=False)) == {
        k: {"calls": 4 * v["calls"], "bytes": 4 * v["bytes"]}
        for k, v in one.items()}
    fs = summary(step_calls(units, 2, "fsdp2_full", 3))
    assert fs["reduce_scatter"]["calls"] == len(units)
    assert fs["all_gather"]["calls"] == 3 * 2 * len(units)


def test_deepspeed_accumulation_volumes():
    from labkit.predict.sharding.accumulation import deepspeed_step
    psi = 1000
    # ZeRO-1 reduces once per step, ZeRO-2 every micro-batch
    assert deepspeed_step(psi, 1, 4) == deepspeed_step(psi, 1, 1)
    assert deepspeed_step(psi, 2, 4)["all_reduce"] == 4 * 4 * psi
    z3 = deepspeed_step(psi, 3, 4, gather_in_backward=True)
    assert z3 == {"all_gather": 8 * 4 * psi, "reduce_scatter": 4 * 4 * psi}
    with pytest.raises(ValueError):
        deepspeed_step(psi, 0, 1)


def test_gpt_record_plans_as_the_gpt_sizes():
    from labkit.predict.model import arch
    g = F.GPU8
    m = g["model"]
    rec = {"arch": arch.gpt(m["layers"], m["hidden"], m["heads"],
                            m["vocab"], m["seq"]), "seq": m["seq"]}
    # the same units, Q/K/V as three tensors (the GPT fuses them: one)
    size = [[math.prod(s) for s in u] for u in F.unit_shapes(
        m["layers"], m["hidden"], m["heads"], m["vocab"], m["seq"])]
    assert [sum(math.prod(s) for s in u) for u in F._units(F._full(rec))] \
        == [sum(u) for u in size]
    args = (8, g["global_batch"], g["budget_bytes"], g["flops_per_s"],
            g["link_bytes_per_s"], "fsdp_bf16", "cuda")
    for x, y in zip(F.plan(m, *args), F.plan(rec, *args)):
        for k in ("params", "states", "activations", "transient", "total",
                  "fits", "wire_bytes"):
            assert x[k] == y[k], k
        assert x["step_s"] == pytest.approx(y["step_s"], rel=1e-12)


def test_llama3_8b_capstone_plan():
    from labkit.predict.model import arch
    from labkit.predict.model import params as P
    a = arch.preset("llama3-8b")
    m = {"arch": a, "seq": 8192}
    g = F.GPU8
    rows = F.plan(m, 8, 32, 80e9, g["flops_per_s"], g["link_bytes_per_s"],
                  "fsdp_bf16", "cpu")
    assert all(r["params"] == P.total(a) == 8_030_261_248 for r in rows)
    assert not any(r["fits"] for r in rows if r["strategy"] == "ddp")
    best = F.choose(rows)
    assert best["strategy"] == "fsdp2_full"
    # the untied 128K head's fp32 log-softmax: b s V x 4 bytes per sequence
    from labkit.predict.activations import arch as AA
    head = [e for e in AA.saved(a, 8192, 1, "fsdp_bf16") if
            e.name.startswith("log_softmax")]
    assert head[0].bytes == 8192 * 128256 * 4


def test_a_lab_model_dict_with_arch_reads_the_record():
    """Lab 12's ``model`` dict with ``arch``: "gpt" prices exactly as the
    plain sizes, "llama" as the record of those sizes; its units are the
    Llama-style decoder's FSDP units, tensor by tensor."""
    from labkit.nn.model import GPTConfig, build, sharding_units
    from labkit.predict.model import arch
    args = (2, 16, 6e6, 1e10, 1e9)
    assert F.plan({**CPU, "arch": "gpt"}, *args) == F.plan(CPU, *args)
    llama = {**CPU, "arch": "llama"}
    rec = {"arch": arch.of_shape(**CPU, arch="llama"), "seq": CPU["seq"]}
    assert F.plan(llama, *args) == F.plan(rec, *args)
    m = build(GPTConfig(**llama))
    want = [sorted(tuple(p.shape) for p in u.parameters())
            for u in sharding_units(m)]
    assert [sorted(u) for u in F.units(llama)] == want
    assert F.per_rank_bytes(llama, 2, F.Config("ddp", "none", 1, 1))[
        "params"] == sum(p.numel() for p in m.parameters())
    for rc in ("none", "full", "selective"):   # the GPT path, unchanged
        assert F.saved(CPU, 2, recompute=rc) == A.saved(
            4, 64, 4, 256, 64, 2, recompute=rc)
    assert F.recompute_flop_ratio(llama, "selective") == 1.0
    assert F.recompute_flop_ratio(llama, "full") > 1.3


def test_the_pick_as_the_whole_job_under_fsdp2():
    """Chapter 12's verdict: the row's bytes are the ledger, FSDP2's
    named terms and the activations; the whole job adds the runtime floor
    (labkit.predict.memory.job), and the headroom is what is left."""
    from labkit.predict.memory.floor import floor
    g = F.GPU8
    rows = F.plan(g["model"], g["world_size"], g["global_batch"],
                  g["budget_bytes"], g["flops_per_s"],
                  g["link_bytes_per_s"], precision="fsdp_bf16",
                  device="cuda")
    best = F.choose(rows)
    j = F.job_verdict(g["model"], 8, best, g["budget_bytes"])
    fl = j["floor"]["total"]
    assert j["gpu_need"] - fl == pytest.approx(best["total"])
    assert fl == pytest.approx(floor(8, allocated=best["total"])["total"])
    assert j["headroom"] == pytest.approx(80e9 - j["gpu_need"])
    assert j["fits"] and j["sentence"].startswith("fits with")
    assert j["terms_gpu"] > 0
    with pytest.raises(ValueError, match="FSDP2"):
        F.job_verdict(g["model"], 8, [r for r in rows
                                      if r["strategy"] == "ddp"][0], 80e9)


def test_step_flops_is_what_the_plan_prices_per_rank():
    """A step's hardware FLOPs (lab 12 divides them by a measured step's
    seconds) are the plan's per-rank FLOPs times the ranks; full
    recomputation adds its second forward."""
    rows = F.plan(CPU, 2, 16, 6e6, 1e10, 1e9)
    for r in rows:
        assert 2 * r["flops"] == pytest.approx(F.step_flops(
            CPU, 16, r["recompute"]))
    assert F.step_flops(CPU, 8, "full") / F.step_flops(CPU, 8) == \
        pytest.approx(F.recompute_flop_ratio(CPU, "full"))
