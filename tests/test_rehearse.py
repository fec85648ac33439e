"""The GPU profiles rehearsed on a CPU (labkit.rehearse, issue 28): gpu8
and gpu1 against the described 8 x H100 node, exit 0 on the fixed tree,
every lab rehearsed or listed with its reason; the dry run's profile
checks (they were tests/test_dryrun.py's, on the same rows); and the
mutation test: each defect reintroduced fails the rehearsal with one
line naming the lab, the launch or case and rank, and the rule."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch.distributed as tdist

from labkit.dryrun import cli, labs as L
from labkit.measure.collectives import added
from labkit.preflight import load_profile
from labkit.predict import context_parallel as CP
from labkit.predict.memory.job import on_gpu
from labkit.rehearse import run as R
from labkit.rehearse.labs import Launch, Plan
from labkit.rehearse.node import describe


# the first test of each profile pays for its whole rehearsal (CI: about
# 370 s for gpu8 on 2 busy cores, near pytest's 600 s per test)
pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def gpu8():
    return R.rehearse("gpu8")


@pytest.fixture(scope="module")
def gpu1():
    # lab 11's notebook is executed in the gpu8 rehearsal; here its
    # launches are rehearsed directly (the make test budget)
    return R.rehearse("gpu1", cells=())


def _every_lab(report, name):
    assert set(report["labs"]) == set(load_profile(name))
    for lab, res in report["labs"].items():
        if "listed" in res:
            assert len(res["listed"]) > 20, lab   # a reason, in words
        else:
            assert res.get("launches") or res.get("cases") or \
                res.get("notebook"), lab
        for c in res.get("notebook", {}).get("cells", []):
            assert c["status"] in ("ran", "not rehearsed"), (lab, c)
            if c["status"] == "not rehearsed":    # listed with a reason
                assert len(c["reason"]) > 20, (lab, c)
    assert report["failures"] == [], report["failures"]
    assert R.table(report).endswith("=> OK")


def _dry_rows_agree(report):
    """The dry run's checks: model states as the ledger, peak >= states."""
    for res in report["labs"].values():
        for row in res.get("cases", []):
            assert min(row[k] for k in cli.ROWS) >= 0
            assert row["peak"] >= row["states"] > 0
            assert row["states"] == pytest.approx(
                row["predicted"]["states"], rel=0.01)
            # the peak plus the runtime floor, a margin kept free: the
            # rule preflight judges its predictions by
            assert row["fits"] == on_gpu(row["peak"], row["world_size"],
                                         row["gpu_bytes"])["fits"]


def test_gpu8_rehearsed_exit_0(gpu8):
    _every_lab(gpu8, "gpu8")
    _dry_rows_agree(gpu8)
    pre = {c["name"]: c["status"] for c in gpu8["preflight"]}
    assert pre == {"gpus": "ok", "compute capability": "ok",
                   "gpu memory": "ok", "gpu headroom": "ok",
                   "expected OOM": "ok"}
    for lab in ("pipeline_parallel", "colossalai", "collectives"):
        assert "listed" in gpu8["labs"][lab]
    rows = {r["variant"]: r for r in gpu8["labs"]["memory"]["cases"]}
    assert rows["fsdp2_full"]["states"] == pytest.approx(
        rows["ddp"]["states"] / 8, rel=0.01)   # FULL_SHARD: 1/8 of DDP


def test_gpu8_lab_12_ooms_where_expected_and_accumulation_fits(gpu8):
    cases = gpu8["labs"]["fit"]["cases"]
    over = [c for c in cases if c["expect_oom"]]
    assert len(over) == 1 and not over[0]["fits"]      # the expected OOM
    acc = [c for c in cases if c["variant"].startswith("accumulation")]
    assert len(acc) == 2 and all(c["fits"] for c in acc)
    held = next(c for c in acc if "no_sync" in c["variant"])
    plain = next(c for c in acc if "no_sync" not in c["variant"])
    # FSDP2 with gradient sync off keeps the unsharded fp32 gradients
    extra = held["predicted"]["held_grads"] - held["predicted"]["grads"]
    assert held["peak"] - plain["peak"] == pytest.approx(extra, rel=0.02)
    # one memory model: preflight's predicted need and the rehearsal's
    # counted one agree within 2 % on every case, each with the floor
    from labkit.preflight.memory import lab_needs
    node = describe()
    needs = {n.what.split(" (the gpu")[0]: n.bytes for n in lab_needs(
        {"fit": load_profile("gpu8")["fit"]}, node.memory)}
    for c in cases:
        assert c["need"] == pytest.approx(needs[c["variant"]], rel=0.02), c


def _cell_launches(report, lab):
    return [la for c in report["labs"][lab]["notebook"]["cells"]
            for la in c["launches"]]


def test_gpu8_lab_11_notebook_executed_every_rank_at_real_size(gpu8):
    """Lab 11's notebook, every cell, through papermill with the gpu8
    parameters: its launch cell's launches at 2, 4 and 8 ranks, every
    rank (ring attention sends point to point), at the profile's sizes."""
    p = load_profile("gpu8")["context_parallel"]
    nb = gpu8["labs"]["context_parallel"]["notebook"]
    assert nb["notebook"] == "11_context_parallel.ipynb"
    assert sum(c["status"] == "ran" for c in nb["cells"]) >= 8
    launches = _cell_launches(gpu8, "context_parallel")
    # one launch per world size, then section 3b's GQA one at the largest
    assert [la["world_size"] for la in launches] == [
        *p["world_sizes"], max(p["world_sizes"])]
    for la in launches:
        n = la["world_size"]
        assert la["ranks"] == list(range(n)) and not la["problems"]
        for r in la["rank_rows"]:
            kv = r["record"]["config"]["kv_heads"] * p["head_dim"]
            for x in r["record"]["results"]:
                got = added(x["comm_forward"], x["comm_backward"])
                want = (CP.ulysses_bytes if x["method"] == "ulysses"
                        else CP.ring_bytes)(p["batch"], p["seq"],
                                            p["heads"] * p["head_dim"], n, 4,
                                            kv_hidden=kv)
                assert got == want, (n, x["method"])
                # what fake tensors cannot produce is not invented
                assert x["out_diff"] == "not rehearsed"
                assert x["seconds"] in (None, "not rehearsed")


def test_gpu1_rehearsed_exit_0(gpu1):
    _every_lab(gpu1, "gpu1")
    _dry_rows_agree(gpu1)
    ddp = gpu1["labs"]["memory"]["cases"][0]
    assert ddp["world_size"] == 1 and ddp["fits"]
    # on 80 GB the gpu1 fit lab's DDP fits: its gpu cell will see no OOM
    pre = {c["name"]: c["status"] for c in gpu1["preflight"]}
    assert pre["gpu memory"] == "ok" and pre["expected OOM"] == "warn"
    over = [c for c in gpu1["labs"]["fit"]["cases"] if c["expect_oom"]]
    assert over[0]["fits"] and "expected OOM not seen" in \
        over[0]["warnings"][0]


def test_node_descriptions():
    assert describe().gpus == 8 and 80e9 < describe().memory < 90e9
    t4 = describe("t4")
    assert t4.gpus == 1 and 15e9 < t4.memory < 16e9
    with pytest.raises(ValueError, match="no such recorded"):
        describe("tpu-v5")


def test_runner_hook(capsys):
    import runpy
    import sys
    argv = sys.argv
    sys.argv = ["run_labs.py", "--profile", "gpu1", "--rehearse",
                "--node", "t4", "--only", "collectives"]
    try:
        with pytest.raises(SystemExit) as e:
            runpy.run_path("scripts/run_labs.py", run_name="__main__")
    finally:
        sys.argv = argv
    out = capsys.readouterr().out
    assert e.value.code == 0, out
    assert "rehearsal of profile gpu1 on 1 x Tesla T4" in out
    assert "collectives: not rehearsed:" in out


# -- the mutation test ------------------------------------------------------
SMALL_CP = {"batch": 1, "seq": 256, "heads": 4, "kv_heads": 2,
            "head_dim": 16, "time_steps": 0}


def _one_line(lines, *words):
    assert len(lines) >= 1, lines
    line = lines[0]
    assert "\n" not in line and all(w in line for w in words), line
    return line


def test_mutation_1_preflight_largest_model_fails(monkeypatch):
    """Defect 1: the largest model's DDP states as the memory need."""
    from labkit.preflight import gpu as preflight_gpu
    from labkit.predict.memory import ledger
    from labkit.preflight.check import Check

    def old(profile, gpu, total, gpus=None):
        lab, psi, bf16 = preflight_gpu.largest_model(profile)
        need = ledger(psi, 1, "ddp", "mixed" if bf16 else "fp32").gpu_total
        return [Check("gpu memory", "ok" if need < 0.9 * total else "fail",
                      f"{total / 1e9:.1f} GB", f"{need / 1e9:.1f} GB DDP "
                      f"states of lab {lab}")]
    monkeypatch.setattr(preflight_gpu, "check_memory", old)
    report = R.rehearse("gpu8", only=["collectives"])
    _one_line(report["failures"], "preflight", "gpu memory", "lab fit")


def test_mutation_2_accumulation_wrapped_fp32_ooms(monkeypatch):
    """Defect 2: lab 12's accumulation wrapped without bf16 or the
    planner's recompute."""
    from labkit.runs.blocks import accumulation as F
    fixed = F.accumulation_setup
    monkeypatch.setattr(F, "accumulation_setup", lambda c, ctx, s, *a:
                        fixed(c, ctx, s, False, "none"))
    # at the chosen micro-batch 2 (the profile runs no_sync at 1, which
    # leaves fp32's 74 GB just inside the H100 with the floor)
    fit = {**load_profile("gpu8")["fit"], "accumulation_micro_batch": 2}
    case = [c for c in L.ADAPTERS["fit"](fit) if "no_sync" in c.variant]
    rows = R.rehearse_cases("fit", Plan(cases=case), describe(), 1)
    _one_line(rows[0]["problems"], "lab fit", "accumulation",
              "every rank", "device memory", "CUDA out of memory")


def test_mutation_4_ungrouped_ring_deadlocks(monkeypatch):
    """Defect 4: ring attention's isend and irecv as separate calls."""
    from labkit.runs.blocks import cp_attention as A
    monkeypatch.setattr(A, "_start", lambda s, r, nxt, prv, g, tag=0: [
        tdist.isend(s, nxt, g, tag), tdist.irecv(r, prv, g, tag)])
    row = R.rehearse_launch("context_parallel", Launch(
        "labkit.runs.context_parallel", 2, SMALL_CP), describe())
    _one_line(row["problems"], "lab context_parallel", "x 2",
              "ranks 0 and 1", "nccl rule", "deadlock")


def test_mutation_cpu_tensor_in_a_collective(monkeypatch):
    """A tensor left on the CPU in a rank's send."""
    from labkit.runs.blocks import cp_attention as A
    fixed = A._start
    monkeypatch.setattr(A, "_start", lambda s, r, *a, **k:
                        fixed(s.to("cpu"), r, *a, **k))
    row = R.rehearse_launch("context_parallel", Launch(
        "labkit.runs.context_parallel", 2, SMALL_CP), describe())
    _one_line(row["problems"], "lab context_parallel", "rank 0",
              "device rule", "a CPU tensor", "nccl collective")


def test_mutation_model_unsharded_on_the_gpu_ooms(monkeypatch):
    """FSDP2 wrapping only the root: the whole model unsharded on the
    GPU from the first forward to the last backward (lab 12's
    accumulation with gradient sync off)."""
    import labkit.training.wrap as W
    monkeypatch.setattr(W, "sharding_units", lambda model: [])
    case = [c for c in L.ADAPTERS["fit"](load_profile("gpu8")["fit"])
            if "no_sync" in c.variant]
    rows = R.rehearse_cases("fit", Plan(cases=case), describe(), 1)
    _one_line(rows[0]["problems"], "lab fit", "accumulation", "every rank",
              "device memory", "CUDA out of memory")


# -- a notebook's launch() under rehearsal (labkit.rehearse.hook) -----------
TINY = {"layers": 1, "hidden": 32, "heads": 2, "vocab": 64, "seq": 16}


def test_launch_under_rehearsal_returns_records_not_values(monkeypatch):
    """``launch()`` with LABKIT_REHEARSE set: the run module's ranks on
    fake tensors, records as a real launch returns them (through JSON),
    the values fake tensors cannot give NaN. An SPMD module: rank 0 and
    the last rank rehearsed, the others stand in (``rehearsed_as``)."""
    import math
    from labkit.launch import launch
    monkeypatch.setenv("LABKIT_REHEARSE", "h100x8")
    ranks = launch("labkit.runs.memory", 4, {
        "strategies": "ddp,fsdp2_full", "steps": 2, "batch": 4,
        "bf16": True, **TINY}, require_gpu=True)
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert [r.get("rehearsed_as") for r in ranks] == [None, 3, 3, None]
    assert ranks[0]["backend"] == "nccl" and ranks[0]["device"] == "cpu"
    run = ranks[0]["runs"][0]
    assert all(math.isnan(x) for x in run["losses"])      # not invented
    assert run["states"]["total"] > 0                     # bytes are real


def test_launch_under_rehearsal_ooms_where_cuda_would(monkeypatch):
    """A rank whose peak exceeds the node's GPU raises the LaunchError a
    real OOM gives (a cell expecting one catches it); more ranks than
    GPUs, or another interpreter, are not rehearsed, with the reason."""
    from labkit.launch import LaunchError, launch
    from labkit.rehearse.hook import NotRehearsed
    monkeypatch.setenv("LABKIT_REHEARSE", "t4")
    big = {**TINY, "layers": 2, "hidden": 4096, "heads": 32,
           "vocab": 128000, "seq": 4096}
    with pytest.raises(LaunchError, match="CUDA out of memory .rehearsed"):
        launch("labkit.runs.memory", 1, {"strategies": "ddp", "steps": 1,
                                         "batch": 8, **big})
    with pytest.raises(NotRehearsed, match="needs >= 2 GPUs"):
        launch("labkit.runs.memory", 2, {"strategies": "ddp", **TINY})


def test_meta_autocast_casts_as_cuda_does():
    """torch.autocast("meta") on a rehearsed rank: matmuls in bf16,
    softmax in fp32, and backward saves the bf16 copies (the casts are
    recorded above autograd, as autocast's are)."""
    import torch
    from labkit.rehearse.autocast import patched_autocast
    w = torch.randn(8, 8, device="meta", requires_grad=True)
    x = torch.randn(4, 8, device="meta")
    with patched_autocast(), torch.autocast("meta", dtype=torch.bfloat16):
        y = torch.nn.functional.linear(x, w)
        z = torch.softmax(y, -1)
    assert y.dtype == torch.bfloat16 and z.dtype == torch.float32
    assert y.grad_fn.name().startswith("Mm") or "Addmm" in \
        y.grad_fn.name() or y.grad_fn.next_functions
    assert torch.autocast is not None and torch.autocast.__name__ in (
        "autocast",)


def test_mutation_notebook_cell_bug(tmp_path):
    """A bug in a notebook's own cell: lab 11's launch cell with a flag
    misspelled (``head-dim`` as ``heads_dim``). Every rank exits 2 at its
    argument parser, as under torchrun; the rehearsal names the lab, the
    cell and the rank. (Lab 11's notebook at small sizes: the cell's code
    is what is under test.)"""
    import json
    from labkit.rehearse.notebooks import (failures, notebook,
                                           rehearse_notebook)
    nb = json.loads(notebook("context_parallel").read_text())
    cell = next(i for i, c in enumerate(nb["cells"])
                if 'launch("labkit.runs.context_parallel"' in
                "".join(c["source"]))
    src = "".join(nb["cells"][cell]["source"])
    nb["cells"][cell]["source"] = src.replace('"head_dim": head_dim',
                                              '"heads_dim": head_dim')
    bad = tmp_path / "11_context_parallel.ipynb"
    bad.write_text(json.dumps(nb))
    params = {**load_profile("gpu8")["context_parallel"], **SMALL_CP,
              "world_sizes": [2]}
    res = rehearse_notebook("context_parallel", params, "gpu8", describe(),
                            nb_path=bad)
    line = _one_line(failures("context_parallel", res),
                     "lab context_parallel", f"cell {cell}", "rank 0",
                     "exit status 2", "heads-dim")
    assert "LaunchError" in line


def test_cell_status_rules():
    """How an executed cell is classed (labkit.rehearse.notebooks)."""
    from labkit.rehearse.notebooks import _status
    ok = {"problems": []}
    assert _status({}, None, [], []) == ("ran", "")
    st, why = _status({}, ("LaunchError", "x, rank 0: device rule: ..."),
                      [ok], [])
    assert st == "failure" and "device rule" in why
    st, why = _status({}, ("NotRehearsed", "..."),
                      [{"not_rehearsed": "needs >= 8 GPUs", **ok}], [])
    assert st == "not rehearsed" and "needs >= 8 GPUs" in why
    assert _status({}, ("AssertionError", ""), [], [])[0] == "not rehearsed"
    assert _status({}, ("NameError", "name 'x'"), [], [])[0] == "failure"
    st, why = _status({}, ("NameError", "name 'x'"), [], [4])
    assert st == "not rehearsed" and "after cell 4" in why
    # the lab's own parameter check refusing the profile is a failure
    check = {"source": 'on_gpu = check("context_parallel", globals())'}
    st, why = _status(check, ("ValueError", "kv_heads 8 must divide heads "
                              "4"), [], [])
    assert st == "failure" and "refused the parameters" in why


def test_loops_are_cut_and_said():
    from labkit.rehearse.hook import cut
    argv, notes = cut(["--steps", "20", "--time-steps", "5", "--bf16",
                       "--steps-x", "3"])
    assert argv == ["--steps", "2", "--time-steps", "0", "--bf16",
                    "--steps-x", "3"]
    assert notes == ["--steps 20 -> 2", "--time-steps 5 -> 0"]


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_a_stopped_rehearsal_says_one_line_and_leaves_no_worker(sig):
    """run_labs.py --rehearse stopped while its pool of forked workers
    runs: SIGTERM prints one line (no worker's traceback), and after
    either signal no worker outlives the runner by more than 5 s."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil
    root = Path(__file__).resolve().parent.parent
    p = subprocess.Popen(
        [sys.executable, "scripts/run_labs.py", "--profile", "gpu8",
         "--rehearse", "--only", "memory"], cwd=root,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=str(root)))
    deadline, kids = time.monotonic() + 120, []
    while len(kids) < 2:
        assert time.monotonic() < deadline, "no worker started"
        kids = psutil.Process(p.pid).children(recursive=True)
        time.sleep(0.2)
    p.send_signal(getattr(signal, sig))
    _, err = p.communicate(timeout=60)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(
            k.is_running() and k.status() != psutil.STATUS_ZOMBIE
            for k in kids):
        time.sleep(0.1)
    left = [k.pid for k in kids
            if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]
    assert not left, left
    if sig == "SIGTERM":
        assert p.returncode == 130
        assert err.strip().splitlines() == [
            "rehearsal stopped (SIGTERM): nothing was kept"], err
