"""labkit.runs.colossalai and its patches, without starting Colossal-AI.

The Colossal-AI ranks themselves run once per test run, in lab 9 (nbval),
against the single-process reference and the ledger; importing Colossal-AI
costs tens of seconds, so these tests keep to what runs in ``.venv``.
"""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from labkit.nn.model import GPTConfig, batch, build, count_params
from labkit.launch import launch
from labkit.predict.tensor_parallel import rank_params
from labkit.runs.colossalai import PLUGINS, state_bytes
from labkit.runs.cai.hybrid import PLUGINS as HYBRID
from labkit.runs.cai.patches import NEEDS, PATCHES, apply
from labkit.training.train import make_optimizer, train_step


def test_state_bytes_of_a_plain_model_is_the_fp32_ledger():
    c = GPTConfig()
    model = build(c)
    opt = make_optimizer(model)
    train_step(model, opt, *batch(c, 4, 0))
    psi = count_params(model)
    b = state_bytes(model, opt)
    assert (b["params"], b["grads"], b["optimizer"]) == (4 * psi, 4 * psi,
                                                         8 * psi)
    assert b["grad_store"] == b["master"] == 0


def test_every_patch_is_named_by_a_plugin_and_documented():
    used = {p for names in NEEDS.values() for p in names}
    assert used == set(PATCHES)
    for f in PATCHES.values():   # each cites the Colossal-AI code
        assert "colossalai/" in f.__doc__
    assert set(PLUGINS) | set(HYBRID) == set(NEEDS)
    assert not set(PLUGINS) & set(HYBRID)


def test_unknown_plugin_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown plugin"):
        apply("gemini2")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_no_patch_on_a_gpu():
    assert all(apply(p) == [] for p in NEEDS)


def test_bad_plugin_fails_before_colossalai_is_imported():
    r = subprocess.run([sys.executable, "-m", "labkit.runs.colossalai",
                        "--plugins", "torch_ddp,nope"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "unknown plugins" in r.stderr


CAI_PYTHON = Path(__file__).parents[1] / ".venv-colossalai" / "bin" / "python"


@pytest.mark.usefixtures("needs_colossalai")     # conftest.py
def test_hybrid_parallel_matches_one_process_and_the_tp_ledger():
    """HybridParallelPlugin tp=2 and pp=2 (2 gloo ranks) against the same
    GPT-2 trained in one process, and each rank's parameters against
    ``labkit.predict.tensor_parallel.rank_params``."""
    c = GPTConfig()
    ranks = launch("labkit.runs.cai.hybrid", 2,
                   {"plugins": ",".join(HYBRID)}, timeout=240,
                   python=CAI_PYTHON)
    shape = (c.layers, c.hidden, c.vocab, c.seq)
    tp, pp = rank_params(*shape, tp=2), rank_params(*shape, pp=2)
    for r in ranks:
        ref = r["reference_losses"]
        for name in HYBRID:
            run = r["runs"][name]
            assert run["losses"] == pytest.approx(ref, rel=1e-5, abs=0)
        assert r["runs"]["hybrid_tp2"]["param_bytes"] == 4 * tp[r["rank"]]
        assert r["runs"]["hybrid_pp2"]["param_bytes"] == 4 * pp[r["rank"]]
