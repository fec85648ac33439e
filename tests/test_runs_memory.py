"""Measured model-state bytes equal the ledger; losses equal one process;
one block's activations equal the architecture record's ledger.

The launch trains the Llama-style block (``--arch llama``), lab 1's CPU
default; the GPT's block is measured in-process below (the run module's
code is the same for both records)."""
import pytest
import torch

from labkit.dist import Context
from labkit.launch import launch
from labkit.nn.model import GPTConfig, arch_of
from labkit.predict import activations as A
from labkit.predict.activations import arch as AA
from labkit.predict.memory import gpt_params, ledger
from labkit.predict.model.params import total
from labkit.runs.memory import measure_activations
from labkit.training.train import reference_losses
from labkit.training.wrap import ZERO_EQUIVALENT

STRATEGIES = ["ddp", "fsdp2_full", "fsdp2_grad_op", "fsdp1_full_shard"]
LLAMA = GPTConfig(arch="llama")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return launch("labkit.runs.memory", 2,
                  {"strategies": ",".join(STRATEGIES), "steps": 3,
                   "arch": "llama"},
                  timeout=180, run_dir=tmp_path_factory.mktemp("memory"))


def _block_ledger(config, micro_batch, precision, recompute):
    """The record's block, twice the micro-batch minus once (as
    :func:`labkit.measure.memory.activation_bytes` measures it)."""
    a = arch_of(config)
    return (A.total(AA.block_saved(a, 2 * micro_batch, config.seq,
                                   precision, recompute))
            - A.total(AA.block_saved(a, micro_batch, config.seq,
                                     precision, recompute)))


@pytest.mark.distributed
def test_param_count_is_the_records(ranks):
    assert ranks[0]["params"] == total(arch_of(LLAMA)) == 125_248
    assert ranks[0]["config"]["arch"] == "llama"


def test_gpt_param_count_is_the_formula():
    c = GPTConfig()
    assert total(arch_of(c)) == gpt_params(c.layers, c.hidden, c.heads,
                                           c.vocab, c.seq)


@pytest.mark.distributed
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_model_states_equal_ledger_exactly(ranks, strategy):
    psi = ranks[0]["params"]
    # fp32 on CPU: 4 + 4 + 8 bytes; at rest FSDP holds shards only
    zero = "full_shard" if ZERO_EQUIVALENT[strategy] != "ddp" else "ddp"
    want = ledger(psi, 2, zero, precision="fp32")
    for r in ranks:
        run = next(x for x in r["runs"] if x["strategy"] == strategy)
        s = run["states"]
        assert s["params"] == want.params_gpu
        assert s["grads"] == want.grads_gpu
        assert s["optimizer"] == want.optimizer_gpu
        unsharded = 4 * psi if strategy.endswith("grad_op") else 0
        assert run["after_forward_unsharded"] == unsharded


@pytest.mark.distributed
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_losses_equal_single_process_reference(ranks, strategy):
    ref = reference_losses(LLAMA, steps=3, batch_size=8)
    run = next(x for x in ranks[0]["runs"] if x["strategy"] == strategy)
    assert run["losses"] == pytest.approx(ref, abs=1e-5)


@pytest.mark.distributed
def test_peak_step_times_and_activations_on_cpu(ranks):
    """The GPU path's records, from their CPU twins (labkit.device)."""
    for r in ranks:
        for run in r["runs"]:
            peak = run["peak"]
            assert peak["source"].startswith("ledger")
            assert peak["bytes"] == (run["states"]["total"]
                                     + run["after_forward_unsharded"])
            # lab 1 compares the ledger with the same quantity on a GPU
            assert run["peak_states"]["bytes"] == peak["bytes"]
            assert len(run["step_s"]) == 3 and run["step_s_median"] > 0
        act = r["activations"]
        c = r["config"]
        assert act["arch"] == "llama" and act["micro_batch"] == 4
        # fp32, full recomputation: only the block's input is kept
        assert act["full"] == 4 * act["micro_batch"] * c["seq"] * c["hidden"]
        for rc in ("none", "full"):    # the Llama record's block, exactly
            assert act[rc] == _block_ledger(LLAMA, 4, "fp32", rc)


@pytest.mark.parametrize("arch", ["gpt", "llama"])
@pytest.mark.parametrize("bf16", [False, True])
def test_one_block_equals_the_records_ledger(arch, bf16):
    """measure_activations on one process (no launch): the block of either
    record, fp32 or bf16 autocast, equals the ledger to the byte."""
    config = GPTConfig(arch=arch)
    ctx = Context(0, 1, 0, "gloo", torch.device("cpu"))
    got = measure_activations(config, 2, ctx, bf16, seed=0)
    precision = "autocast_bf16" if bf16 else "fp32"
    assert got["arch"] == arch
    for rc in ("none", "full"):
        assert got[rc] == _block_ledger(config, 2, precision, rc)
    assert got["none"] > got["full"]
