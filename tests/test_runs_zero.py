"""DeepSpeed ZeRO-0..3 and offload on 2 gloo ranks: bytes, volume, losses.

One torchrun launch trains every CPU variant of ``labkit.predict.zero``;
the tests compare its records with the ledger (plus the named terms of
``labkit.measure.zero.expected_bytes``), with the communication
prediction of ``labkit.predict.sharding`` and with the single-process
reference. One more test starts the same entry point with DeepSpeed's own
launcher.
"""
import json
import os
import subprocess
import sys

import pytest

from labkit.predict.zero import VARIANTS, ZeroConfig, variant

STEPS = 4
BUCKET = 20_000
CPU_VARIANTS = [v for v in VARIANTS if v != "zero3_nvme"]


# -- the config object (no processes) ----------------------------------------

def test_json_sets_clipping_and_the_torch_optimizer():
    j = variant("zero3_offload_params", world_size=2).to_json()
    assert j["gradient_clipping"] == 0.0
    assert j["zero_force_ds_cpu_optimizer"] is False
    assert j["train_batch_size"] == 8
    z = j["zero_optimization"]
    assert z["stage"] == 3
    assert z["offload_param"] == {"device": "cpu", "pin_memory": False}
    assert z["offload_optimizer"] == {"device": "cpu", "pin_memory": False}
    for k in ("stage3_max_live_parameters", "stage3_prefetch_bucket_size",
              "stage3_param_persistence_threshold",
              "stage3_max_reuse_distance", "reduce_bucket_size",
              "contiguous_gradients"):
        assert k in z
    assert "stage3_max_live_parameters" not in variant("zero2").to_json()[
        "zero_optimization"]
    # None leaves DeepSpeed's default (1.0) in charge
    assert "gradient_clipping" not in variant("zero2_default_clip").to_json()
    assert "bf16" in variant("zero1", precision="bf16").to_json()


@pytest.mark.parametrize("kw,msg", [
    ({"stage": 4}, "stage"),
    ({"stage": 2, "offload_param": "cpu"}, "offload_param needs ZeRO"),
    ({"stage": 0, "offload_optimizer": "cpu"}, "offload_optimizer needs"),
    ({"stage": 3, "offload_param": "nvme"}, "nvme_path"),
    ({"gradient_clipping": -1.0}, "gradient_clipping"),
    ({"micro_batch": 0}, "micro_batch"),
    ({"stage3_max_reuse_distance": -1}, "stage3_max_reuse_distance"),
])
def test_bad_configs_fail_before_anything_starts(kw, msg):
    with pytest.raises(ValueError, match=msg):
        ZeroConfig(**kw)
    with pytest.raises(ValueError, match="unknown DeepSpeed variant"):
        variant("zero4")


def test_accepts_the_deepspeed_launchers_local_rank():
    from labkit.runs.zero import parse_args
    a = parse_args(["--local_rank=1", "--variants", "zero1"])
    assert a.variants == ["zero1"] and a.local_rank == 1


# -- one launch, every CPU variant -------------------------------------------

@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    from labkit.launch import launch
    ext = tmp_path_factory.mktemp("torch_extensions")
    res = launch("labkit.runs.zero", 2, {
        "variants": ",".join(CPU_VARIANTS), "fsdp": "fsdp2_full",
        "reference": True, "steps": STEPS, "reduce_bucket_size": BUCKET},
        timeout=300, run_dir=tmp_path_factory.mktemp("zero"),
        env={"TORCH_EXTENSIONS_DIR": str(ext)})
    res[0]["_ext_dir"] = ext
    return res


distributed = pytest.mark.distributed


@distributed
def test_nothing_was_compiled(ranks):
    assert ranks[0]["shm_op_skipped"] is True
    assert not any(ranks[0]["_ext_dir"].iterdir())


@distributed
@pytest.mark.parametrize("name", CPU_VARIANTS + ["fsdp2_full"])
def test_losses_equal_reference_with_clipping_off(ranks, name):
    ref = ranks[0]["reference"]
    run = ranks[0]["runs"][name]
    if name == "zero2_default_clip":
        # DeepSpeed's default clips at 1.0; the tiny GPT's gradient norm is
        # ~1.1, so the losses move off the reference (a little: Adam
        # divides most of a global rescaling away)
        assert run["gradient_clipping"] == 1.0
        assert max(abs(a - b) / b for a, b in zip(run["losses"], ref)) > 1e-6
        return
    if run["engine"] == "deepspeed":
        assert run["gradient_clipping"] == 0.0
    assert run["losses"] == pytest.approx(ref, rel=1e-6)


def _explained(r, name) -> dict:
    """Assert each measured category lies in [expected, expected + slack];
    return the expectation."""
    from labkit.measure.zero import expected_bytes
    run = r["runs"][name]
    exp = expected_bytes(run["config"], r["param_numels"], r["world_size"],
                         r["no_grad_input_numels"], run["optimizer_class"],
                         run["grad_accum_dtype"])
    got = run["bytes_end_of_backward"]
    for cat in ("params", "grads", "optimizer"):
        e = exp[cat]
        assert e["expected"] <= got[cat] <= e["expected"] + e["slack"], (
            r["rank"], cat, got[cat], e)
    return exp


@distributed
@pytest.mark.parametrize("name", CPU_VARIANTS)
def test_model_state_bytes_are_ledger_plus_named_terms(ranks, name):
    for r in ranks:
        run = r["runs"][name]
        got = run["bytes_end_of_backward"]
        exp = _explained(r, name)
        stage = run["config"]["stage"]
        if stage <= 1:   # full gradients, no bucket left: exact
            assert got["grads"] == exp["grads"]["ledger"]
        if stage == 3:   # after the reduction, the partition exactly
            assert run["bytes_after_backward"]["grads"] == \
                exp["grads"]["ledger"] + exp["grads"]["padding"]


@distributed
def test_fp32_master_copy_is_what_stage_one_to_three_add(ranks):
    psi = ranks[0]["params"]
    zero0 = ranks[0]["runs"]["zero0"]["bytes_end_of_backward"]
    assert zero0["master"] == 0 and zero0["optimizer"] == 8 * psi
    for name in ("zero1", "zero2", "zero3"):
        got = ranks[0]["runs"][name]["bytes_end_of_backward"]
        assert got["master"] == 4 * psi / 2
        assert got["optimizer"] == (8 + 4) * psi / 2


@distributed
def test_zero3_keeps_small_parameters_whole_until_told_not_to(ranks):
    psi = ranks[0]["params"]
    runs = ranks[0]["runs"]
    assert runs["zero3"]["bytes_end_of_backward"]["persistent_params"] == \
        4 * psi
    assert runs["zero3_no_persist"]["bytes_after_backward"]["params"] == \
        4 * psi / 2


def _by_op(run):
    return {op: v["bytes"] for op, v in run["comm"].items()}


@distributed
def test_collective_volume_per_stage(ranks):
    from labkit.measure.zero import volume_units
    from labkit.predict.sharding import step_comm, units_of_phi
    rec = ranks[0]
    psi, runs = rec["params"], rec["runs"]
    full = 4 * psi           # fp32 bytes of one copy of the weights

    def units(name):
        return volume_units(runs[name]["comm_records"], psi)

    def predicted(strategy):
        return units_of_phi(step_comm(psi, 2, strategy, param_bytes=4), psi)

    # ZeRO-0: one all-reduce of every gradient = DDP's 2 Phi
    assert _by_op(runs["zero0"]) == {"all_reduce": full}
    assert units("zero0") == predicted("ddp") == 2
    # ZeRO-2 reducing to owners: reduce-scatter-like Phi + all-gather Phi
    z2r = _by_op(runs["zero2_reduce"])
    assert z2r["reduce"] == full and z2r["all_gather"] == full
    assert units("zero2_reduce") == pytest.approx(predicted("zero2"),
                                                  abs=1e-4)
    # DeepSpeed's default ZeRO-1/2 all-reduce whole buckets: 3 Phi
    for name in ("zero1", "zero2"):
        by = _by_op(runs[name])
        assert by["all_gather"] == full
        assert full <= by["all_reduce"] <= full + 8   # + the norm's scalar
        assert units(name) == pytest.approx(3, abs=1e-4)
    # ZeRO-3 as configured by default: every parameter of the tiny model is
    # persistent, so no forward/backward gathers, one gather after the step
    z3 = _by_op(runs["zero3"])
    assert z3["reduce_scatter"] == full and z3["all_gather"] == full
    assert units("zero3") == pytest.approx(2, abs=1e-4)
    # only with persistence, reuse distance AND prefetch off: 3 Phi
    for name in ("zero3_persist0", "zero3_persist0_reuse0"):
        assert units(name) == pytest.approx(2, abs=1e-4)
    z3n = _by_op(runs["zero3_no_persist"])
    assert z3n["all_gather"] == 2 * full and z3n["reduce_scatter"] == full
    assert units("zero3_no_persist") == pytest.approx(predicted("zero3"),
                                                      abs=1e-4)
    # and FSDP2 FULL_SHARD does 3 Phi with nothing to configure
    assert units("fsdp2_full") == pytest.approx(3)


# -- DeepSpeed's launcher ----------------------------------------------------

@distributed
def test_runs_under_the_deepspeed_launcher(tmp_path):
    from labkit.launch import ROOT, _kill_group, free_port
    exe = os.path.join(os.path.dirname(sys.executable), "deepspeed")
    if not os.path.exists(exe):
        pytest.skip("no deepspeed launcher next to this python")
    env = dict(os.environ, LABKIT_RUN_DIR=str(tmp_path / "run"),
               OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT),
               TORCH_EXTENSIONS_DIR=str(tmp_path / "ext"))
    env.pop("LABKIT_BACKEND", None)
    cmd = [exe, "--num_gpus", "2", "--master_port", str(free_port()),
           "--module", "labkit.runs.zero", "--variants", "zero1",
           "--steps", "2"]
    with open(tmp_path / "log.txt", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                env=env, cwd=ROOT, start_new_session=True)
        try:
            rc = proc.wait(timeout=240)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            pytest.fail("deepspeed launcher timed out:\n"
                        + (tmp_path / "log.txt").read_text()[-3000:])
        finally:
            _kill_group(proc, grace_s=1.0)
    assert rc == 0, (tmp_path / "log.txt").read_text()[-3000:]
    recs = [json.loads((tmp_path / "run" / f"rank-{r}.json").read_text())
            for r in range(2)]
    assert [r["rank"] for r in recs] == [0, 1]
    assert all(r["world_size"] == 2 for r in recs)
    assert recs[0]["runs"]["zero1"]["losses"] == \
        recs[1]["runs"]["zero1"]["losses"]


def test_pcie_traffic_of_offload():
    from labkit.predict.zero import pcie_bytes_per_step
    m = 1e9
    # ZeRO-Offload paper, Sec. 3: 4M bytes per step on one GPU
    assert pcie_bytes_per_step(m, 1, True, False)["total"] == 4 * m
    assert pcie_bytes_per_step(m, 8, True, False)["total"] == 4 * m / 8
    # parameters too: their partition comes up twice (forward, backward)
    p = pcie_bytes_per_step(m, 8, True, True)
    assert p["to_gpu"] == 4 * m / 8 and p["to_cpu"] == 2 * m / 8
    assert pcie_bytes_per_step(m, 8, False, False)["total"] == 0
    with pytest.raises(ValueError):
        pcie_bytes_per_step(m, 0, True, False)


def test_config_module_imports_no_torch():
    # a notebook builds and checks the JSON before any process starts
    code = ("import sys, labkit.predict.zero; "
            "assert 'torch' not in sys.modules; "
            "assert 'deepspeed' not in sys.modules")
    from labkit.launch import ROOT
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT,
                   env=dict(os.environ, PYTHONPATH=str(ROOT)))


# -- the gpu8 path on gloo: bf16, optimizer offload, timing, peak -------------

@pytest.fixture(scope="module")
def bf16_ranks(tmp_path_factory):
    from labkit.launch import launch
    return launch("labkit.runs.zero", 2, {
        "variants": "zero0,zero2_offload_opt",
        "steps": 2, "time_steps": 1, "bf16": True,
        "reduce_bucket_size": BUCKET}, timeout=300,
        run_dir=tmp_path_factory.mktemp("zero_bf16"))


@distributed
def test_bf16_offload_keeps_an_fp32_gradient_partition(bf16_ranks):
    """ZeRO-Offload's master.grad is fp32 on the host: 4 bytes / N each."""
    for r in bf16_ranks:
        exp = _explained(r, "zero2_offload_opt")
        assert exp["optimizer"]["ledger_gpu"] == 0    # all of it offloaded


@distributed
def test_bf16_zero0_is_explained_by_lab4s_rule(bf16_ranks):
    """Lab 4's gpu profiles: ZeRO-0 + bf16. DeepSpeed 0.19.8 accumulates in
    bf16 there (``get_data_types``) and wraps the optimizer in its
    FP16_UnfusedOptimizer (``DDP_BFLOAT16``): the plain ledger holds."""
    for r in bf16_ranks:
        run = r["runs"]["zero0"]
        assert (run["optimizer_class"], run["grad_accum_dtype"]) == (
            "FP16_UnfusedOptimizer", "bf16")
        exp = _explained(r, "zero0")
        assert all(len([k for k in exp[c] if k not in (
            "ledger", "ledger_gpu", "expected", "slack")]) == 0
            for c in ("params", "grads", "optimizer"))


@distributed
def test_timed_runs_report_throughput_and_a_labelled_peak(bf16_ranks):
    run = bf16_ranks[0]["runs"]["zero2_offload_opt"]
    assert run["step_s"] > 0 and run["tokens_per_s"] > 0
    assert run["peak"]["bytes"] > 0
    assert run["peak"]["source"].startswith("ledger")   # cpu: no allocator


@distributed
def test_lab9_reads_the_peak_of_every_run_record(bf16_ranks):
    """Lab 9's GPU cell reads zero and colossalai records with one reader
    (issue 17, defect 2: it read ``max_memory_allocated`` from both)."""
    from labkit.device import peak_of
    for run in bf16_ranks[0]["runs"].values():
        assert peak_of(run) == run["peak"]["bytes"] > 0
    assert peak_of({"max_memory_allocated": 7}) == 7   # colossalai's key
    with pytest.raises(KeyError, match="max_memory_allocated"):
        peak_of({"step_s": 1.0})


# -- bf16: the wrappers DeepSpeed picks (lab 4 on a GPU) ---------------------

@pytest.fixture(scope="module")
def bf16_fp32_accum_ranks(tmp_path_factory):
    """bf16 with fp32 gradient accumulation on 3 ranks (padding shows):
    ZeRO-0 keeps DeepSpeed 0.19.8's default (bf16 accumulation, its
    FP16_UnfusedOptimizer), ZeRO-1 gets ``BF16_Optimizer`` (what ZeRO-0 got
    in DeepSpeed releases that defaulted bf16 to fp32 accumulation), ZeRO-2
    an fp32 gradient partition."""
    from labkit.launch import launch
    return launch("labkit.runs.zero", 3, {
        "variants": "zero0,zero1,zero2", "bf16": True, "steps": 2,
        "batch": 6, "grad_accum_dtype": "fp32",
        "reduce_bucket_size": BUCKET}, timeout=300,
        run_dir=tmp_path_factory.mktemp("zero_bf16"))


@distributed
def test_bf16_wrappers_are_explained_by_lab4s_rule(bf16_fp32_accum_ranks):
    ranks = bf16_fp32_accum_ranks
    classes = {n: ranks[0]["runs"][n]["optimizer_class"]
               for n in ("zero0", "zero1", "zero2")}
    assert classes["zero1"] == "BF16_Optimizer", classes
    assert ranks[0]["runs"]["zero0"]["grad_accum_dtype"] == "bf16"
    for r in ranks:
        for name in classes:
            _explained(r, name)
    # BF16_Optimizer keeps the whole fp32 gradient beside the bf16 one
    exp = _explained(ranks[0], "zero1")
    assert exp["grads"]["fp32_accumulation"] >= 2 * exp["grads"]["ledger"]


def test_bf16_optimizer_at_zero0_is_partitioned():
    """The ZeRO-0 + BF16_Optimizer case (issue 17, defect 1): whole fp32
    gradients, master and Adam over 1/N, in the rule's expectation."""
    from labkit.measure.zero import expected_bytes
    numels, n = [1000, 24, 7], 8
    phi = sum(numels)
    padded = -(-phi // (2 * n)) * 2 * n
    cfg = variant("zero0", world_size=n, precision="bf16").asdict()
    exp = expected_bytes(cfg, numels, n, (), "BF16_Optimizer", "fp32")
    assert exp["params"]["expected"] == 2 * padded
    assert exp["grads"]["expected"] == 2 * phi + 4 * padded
    assert exp["optimizer"]["expected"] == 12 * padded / n
    plain = expected_bytes(cfg, numels, n, (), "FP16_UnfusedOptimizer",
                           "bf16")
    assert plain["optimizer"]["expected"] == 12 * phi
