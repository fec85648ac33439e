"""labkit.dryrun: the 70B exam case, a real CPU run holding the byte
counter to what was allocated, a reintroduced bug the dry run must catch,
and the adapters' imports. The gpu8 and gpu1 profiles at their real sizes
are checked on the rehearsal's rows (tests/test_rehearse.py runs the dry
run's cases once for both)."""
from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as tdist

from labkit.dryrun import cli, labs as L
from labkit.dryrun.fake import rank_context
from labkit.dryrun.step import counted_step, dry_step
from labkit.predict.memory import gpt_params


# The 70B shape at 8 and 16 GPUs (16 Psi / 8 within 1 %, no fit on 80 GB,
# halved on 16) is dry-run once, by chapter 1's cell that glues those
# numbers into its prose; its asserts fail the strict build of make test.


def test_mutation_bf16_qkv_bug_is_caught(monkeypatch):
    """Last round's bug: dtensor_block built its Q, K, V layers with
    ``nn.Linear(h, h)`` (fp32, default device) beside a bf16 block. At the
    gpu8 size the dry run must fail on it."""
    import types
    from labkit.runs.tp import layers as T  # where Q, K, V are built

    def linear(i, o, device=None, dtype=None, **kw):
        return torch.nn.Linear(i, o, **kw)  # the fix's device/dtype dropped
    buggy_nn = types.SimpleNamespace(**{**vars(torch.nn), "Linear": linear})
    from labkit.preflight import load_profile
    section = {**load_profile("gpu8")["tensor_parallel"], "tp_sizes": [8]}
    case = next(c for c in L.ADAPTERS["tensor_parallel"](section)
                if c.variant.startswith("dtensor"))
    gpu = cli.gpu_bytes("h100-80gb")
    assert cli.run_cases([case], gpu, {})[0]["agrees"]  # the fixed code
    monkeypatch.setattr(T, "nn", buggy_nn)
    row = cli.run_cases([case], gpu, {})[0]
    assert not row["agrees"]  # fp32 Q, K, V: more bytes than the ledger
    assert row["states_ratio"] > 1.2


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2_full"])
def test_counter_real_equals_fake_and_allocated(strategy):
    """The same counted step on real CPU tensors and on fake ones gives the
    same bytes per category, and the real ones are what was allocated."""
    c = L.GPTConfig(layers=2, hidden=64, heads=4, vocab=128, seq=32)
    case = L.dp_case("t", strategy, c, 1, 4, False)
    # an in-memory store: no port, so two test runs on one machine never
    # meet on it
    tdist.init_process_group("gloo", store=tdist.HashStore(), rank=0,
                             world_size=1)
    try:
        real = counted_step(case, rank_context(1, 0))
    finally:
        tdist.destroy_process_group()
    fake = dry_step(case)
    psi = gpt_params(c.layers, c.hidden, c.heads, c.vocab, c.seq)
    assert real["params"] == 4 * psi  # fp32 weights, allocated
    assert real["grads"] == 4 * psi
    assert real["optimizer"] == 8 * psi  # Adam's two moments
    assert real["activations"] > 0 and real["peak"] > 16 * psi
    # fused Adam (the node's, the dry run's) keeps its step counters apart
    # from the loop's: a few bytes of peak
    assert {k: v for k, v in fake.items() if k != "peak"} == \
        {k: v for k, v in real.items() if k != "peak"}
    assert fake["peak"] == pytest.approx(real["peak"], abs=64)


def test_command_line_json(capsys):
    import json
    from labkit.__main__ import main
    argv = ["dryrun", "--layers", "2", "--hidden", "64", "--heads", "4",
            "--vocab", "128", "--seq", "32", "--gpus", "8", "--json"]
    assert main(argv) == 0
    row = json.loads(capsys.readouterr().out)["labs"]["shape"]["cases"][0]
    assert row["agrees"] and row["fits"] and row["gpu_bytes"] == 80e9
    assert set(cli.ROWS) <= set(row)
    assert main(["dryrun", "--profile", "nope"]) == 2


def test_adapters_import_no_circle():
    """Each adapter module imports the registry, never labs.py: importing
    any of them first works, and the registry module imports no adapter."""
    import subprocess
    import sys
    code = ("import sys; import labkit.dryrun.{m} as M; "
            "assert 'labkit.dryrun.labs' not in sys.modules, 'circle'")
    for m in ("fit_lab", "mesh_lab", "cases"):
        r = subprocess.run([sys.executable, "-c", code.format(m=m)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("strategy", ["fsdp2_full", "fsdp1_full_shard",
                                      "ddp"])
def test_wrap_moves_the_whole_model_only_for_ddp(strategy, monkeypatch):
    """FSDP shards unit by unit and moves each unit as it shards it: the
    whole unsharded model is never moved to the GPU at once (issue 28);
    DDP's replica is."""
    from labkit.training import wrap as W
    from labkit.dryrun.fake import fake_world
    from labkit.nn.model import build
    moved = []
    to = torch.nn.Module.to
    monkeypatch.setattr(torch.nn.Module, "to", lambda self, *a, **k: (
        moved.append(type(self).__name__), to(self, *a, **k))[1])
    c = L.GPTConfig(layers=2, hidden=64, heads=4, vocab=128, seq=32)
    with fake_world(2, 0):
        W.wrap(build(c), strategy, rank_context(2, 0))
    assert ("GPT" in moved) == (strategy == "ddp"), moved


def test_a_case_a_forked_child_cannot_run_runs_in_the_parent(monkeypatch):
    """A parent whose autograd engine started device threads before the
    fork leaves children that refuse backward (seen on one pytest worker):
    those cases are stepped in the parent, and every case is measured."""
    parent = os.getpid()
    real = cli.dry_step

    def refusing(case):
        if os.getpid() != parent:
            raise RuntimeError("Unable to handle autograd's threading in "
                               "combination with fork-based multiprocessing")
        return real(case)

    monkeypatch.setattr(cli, "dry_step", refusing)
    c = L.GPTConfig(layers=1, hidden=32, heads=2, vocab=64, seq=16)
    cases = [L.dp_case("t", s, c, 1, 4, False) for s in ("ddp", "fsdp2_full")]
    cache: dict = {}
    cli.run_all(cases, cache, 2)
    assert len(cache) == 2
    assert all(v[2]["params"] > 0 for v in cache.values())


def test_the_table_shows_a_row_without_a_predicted_total():
    """Lab 13's case prices its parts, not a total: `labkit dryrun
    --profile gpu1` stopped on KeyError 'total' printing its table."""
    row = {k: 1e9 for k in cli.ROWS} | {
        "variant": "dp1xep2", "world_size": 2, "fits": True,
        "margin_bytes": 1e9, "predicted": {"states": 1e9}}
    text = cli.table({"experts": {"cases": [row]}}, "h100-80gb")
    assert "dp1xep2" in text and "       -" in text
