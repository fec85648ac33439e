"""Exact resume after a SIGKILL (torchrun --max-restarts 1), and the same
checkpoint loaded on 2 ranks and in 1 process: bit for bit."""
import json
import shutil

import pytest
import torch

from labkit.checkpoint import checkpoint_root
from labkit.launch import launch
from labkit.measure.checkpoint import (dcp_bytes, deepspeed_bytes,
                                       torch_save_bytes)
from labkit.nn.model import GPTConfig
from labkit.predict.checkpoint import checkpoint_bytes, lost_steps
from labkit.predict.memory import gpt_params
from labkit.runs.tools.reshard import load_plain

pytestmark = pytest.mark.distributed

STEPS, EVERY, KILL = 6, 2, 3


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = checkpoint_root("test-runs-checkpoint")
    shutil.rmtree(root, ignore_errors=True)
    run_dir = tmp_path_factory.mktemp("resume")
    res = launch("labkit.runs.checkpoint", 4, {
        "ckpt_dir": root / "resumed", "steps": STEPS, "every": EVERY,
        "kill_rank": 2, "kill_step": KILL, "reference": True},
        timeout=300, max_restarts=1, run_dir=run_dir)
    last = root / "reference" / f"step-{STEPS:06d}"
    re = launch("labkit.runs.tools.reshard", 2, {"ckpt": last,
                                           "out": root / "reshard",
                                           "deepspeed": True},
                timeout=240, run_dir=tmp_path_factory.mktemp("reshard"))
    yield {"resume": res, "log": run_dir / "steps.jsonl", "root": root,
           "last": last, "reshard": re}
    shutil.rmtree(root, ignore_errors=True)


def test_resume_is_bit_identical_and_counts_every_step_once(runs):
    run, ref = runs["resume"][0]["run"], runs["resume"][0]["reference"]
    assert run["attempt"] == 1 and ref["attempt"] == 1
    ckpt = KILL // EVERY * EVERY
    assert run["resumed_from"] == ckpt
    log = [json.loads(x) for x in runs["log"].read_text().splitlines()]
    first = [r["step"] for r in log if r["attempt"] == 0]
    assert first == list(range(KILL))           # died in step KILL
    kept = {r["step"]: r["loss"] for r in log
            if r["attempt"] == 1 or r["step"] < ckpt}
    assert sorted(kept) == list(range(STEPS))   # each step once
    assert len(first) - ckpt == lost_steps(KILL, ckpt)   # redone
    assert [kept[s] for s in range(STEPS)] == [
        ref["losses"][str(s)] for s in range(STEPS)]     # bit-identical
    assert run["adam_steps"] == ref["adam_steps"] == [STEPS]
    assert run["next_loss"] == ref["next_loss"]


def test_reshard_4_to_2_to_1(runs):
    p4 = torch.load(runs["root"] / "reference" / "params-4.pt")
    p2 = torch.load(runs["root"] / "reshard" / "params-2.pt")
    plain, loss1 = load_plain(runs["last"], GPTConfig())
    p1 = plain.state_dict()
    assert all(torch.equal(p4[k], p2[k]) and torch.equal(p4[k], p1[k])
               for k in p4)
    loss4 = runs["resume"][0]["reference"]["next_loss"]
    assert runs["reshard"][0]["next_loss"] == pytest.approx(loss4, abs=1e-5)
    assert loss1 == pytest.approx(loss4, abs=1e-5)


def test_bytes_equal_the_ledger(runs):
    psi = gpt_params(2, 64, 4, 256, 32)
    m = dcp_bytes(runs["last"])
    pred = checkpoint_bytes(psi, 4, "full_shard", "fp32")
    assert [m["state"][r] for r in range(4)] == pred
    for r in range(4):
        assert m["files"][r] == m["state"][r] + m["framing"][r] + m["small"][r]
    ddp = torch_save_bytes(runs["root"] / "reshard" / "ddp-full.pt")
    assert ddp["state"] == checkpoint_bytes(psi, 2, "ddp", "fp32")[0]
    saves = runs["reshard"][0]["saves"]
    assert saves["async"]["blocked_s"] <= saves["async"]["total_s"]


def test_deepspeed_zero3_and_zero_to_fp32(runs):
    psi = gpt_params(2, 64, 4, 256, 32)
    ds = runs["reshard"][0]["deepspeed"]
    m = deepspeed_bytes(ds["folder"])
    assert m["state"] == dict(enumerate(
        checkpoint_bytes(psi, 2, "zero3", "fp32")))
    assert ds["zero_to_fp32"]["bytes"] == 4 * psi      # the full fp32 model
    full = torch.load(runs["root"] / "reshard" / "zero_to_fp32.pt")
    names = torch.load(runs["root"] / "reference" / "params-4.pt")
    assert set(full) == set(names)


def test_damaged_checkpoints_are_skipped_named_and_kept(runs, tmp_path):
    """One bit flipped in the newest, the one before truncated: the resume
    names both, keeps them aside, and goes on from the good one before,
    with the losses of the uninterrupted run."""
    folder = runs["root"] / "resumed"
    shard = folder / f"step-{STEPS:06d}" / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    older = folder / f"step-{STEPS - EVERY:06d}" / "__0_0.distcp"
    older.write_bytes(older.read_bytes()[:-100])
    run_dir = tmp_path / "run"
    out = launch("labkit.runs.checkpoint", 4, {
        "ckpt_dir": folder, "steps": STEPS, "every": EVERY},
        timeout=300, run_dir=run_dir)
    run, ref = out[0]["run"], runs["resume"][0]["reference"]
    good = STEPS - 2 * EVERY
    bad = [f"step-{STEPS:06d}", f"step-{STEPS - EVERY:06d}"]
    assert run["resumed_from"] == good and run["damaged_checkpoints"] == bad
    assert all((folder / f"{b}.corrupt").is_dir() for b in bad)   # kept
    log = "".join(f.read_text() for f in (run_dir / "logs").glob(
        "**/attempt_0/0/stdout.log"))
    said = [line for line in log.splitlines() if "is damaged" in line]
    assert [b in line for b, line in zip(bad, said)] == [True, True]
    assert "does not match its SHA-256" in said[0] and "bytes" in said[1]
    assert {int(s): v for s, v in run["losses"].items()} == {
        s: ref["losses"][str(s)] for s in range(good, STEPS)}
