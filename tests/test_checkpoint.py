"""Checkpoints go under _build, are written whole or not at all, and a
wrong folder, a full disk or another model shape is one clear error."""
import errno
import json

import pytest

from labkit.checkpoint import (BUILD, CheckpointError, atomic_step_dir,
                               check_meta, checkpoint_root,
                               latest_checkpoint, preflight,
                               require_under_build)

META = {"model": {"layers": 2, "hidden": 64}}


@pytest.fixture
def root():
    import shutil
    r = checkpoint_root("test-checkpoint-rules")
    shutil.rmtree(r, ignore_errors=True)
    yield r
    shutil.rmtree(r, ignore_errors=True)


def test_only_under_build_or_outside_the_checkout(tmp_path):
    with pytest.raises(CheckpointError, match="out of the source tree"):
        require_under_build(BUILD.parent / "labs" / "ckpt")
    assert require_under_build(BUILD / "x").parent == BUILD.resolve()
    # run_labs.py --out /elsewhere: the run folder's checkpoints
    assert require_under_build(tmp_path / "ckpt") == (
        tmp_path / "ckpt").resolve()


def test_unwritable_folder_and_full_disk(root):
    afile = root.parent / "not-a-folder"
    root.parent.mkdir(parents=True, exist_ok=True)
    afile.write_text("x")
    try:
        with pytest.raises(CheckpointError, match="cannot write"):
            preflight(afile / "ckpt", 10)
    finally:
        afile.unlink()
    with pytest.raises(CheckpointError, match="free"):
        preflight(root, 1e18)
    assert preflight(root, 10) == root


def test_rename_only_when_complete(root):
    with atomic_step_dir(root, 2, META) as tmp:
        (tmp / "shard").write_bytes(b"abc")
        assert latest_checkpoint(root) is None       # not yet renamed
    assert latest_checkpoint(root) == (2, root / "step-000002")
    with pytest.raises(CheckpointError, match="disk full at") as e:
        with atomic_step_dir(root, 4, META) as tmp:
            (tmp / "shard").write_bytes(b"half")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert "step-000002" in str(e.value)              # what a resume loads
    assert not (root / "step-000004.tmp").exists()
    assert latest_checkpoint(root)[0] == 2
    # a crash that left a .tmp behind: never loaded
    (root / "step-000006.tmp").mkdir()
    (root / "step-000006.tmp" / "labkit-meta.json").write_text("{}")
    assert latest_checkpoint(root)[0] == 2


def test_another_model_shape(root):
    with atomic_step_dir(root, 2, META):
        pass
    check_meta(root / "step-000002", META["model"])
    with pytest.raises(CheckpointError, match="another model shape"):
        check_meta(root / "step-000002", {"layers": 4, "hidden": 64})
    assert json.loads((root / "step-000002" / "labkit-meta.json")
                      .read_text())["step"] == 2


def _flip_bit(f):
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x10
    f.write_bytes(bytes(data))


DAMAGE = {
    "truncated": lambda f: f.write_bytes(f.read_bytes()[:-7]),
    "zeroed": lambda f: f.write_bytes(bytes(f.stat().st_size)),
    "one bit flipped": _flip_bit,
}


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_damaged_newest_is_set_aside_and_named(root, how):
    from labkit.checkpoint import newest_good_checkpoint
    for step in (2, 4):
        with atomic_step_dir(root, step, META) as tmp:
            (tmp / "__0_0.distcp").write_bytes(bytes(range(256)) * 8)
            (tmp / ".metadata").write_bytes(b"meta")
    DAMAGE[how](root / "step-000004" / "__0_0.distcp")
    said = []
    found, bad = newest_good_checkpoint(root, say=said.append)
    assert found == (2, root / "step-000002") and bad == ["step-000004"]
    assert len(said) == 1 and "step-000004" in said[0] \
        and "__0_0.distcp" in said[0] and "\n" not in said[0]
    kept = root / "step-000004.corrupt"
    assert (kept / "__0_0.distcp").exists()          # never deleted
    assert latest_checkpoint(root)[0] == 2          # never loaded again
    assert newest_good_checkpoint(root, say=said.append) == (found, [])


def test_a_dcp_failure_says_the_ranks_own_error():
    """DCP's CheckpointException prints a dict of wrapped exceptions per
    rank, whose first line is a pybind repr (the gpu8 rehearsal showed
    "not written: <pybind11_builtins...>"): the one line says the first
    rank's own exception instead."""
    import traceback
    from torch.distributed.checkpoint.api import CheckpointException
    from labkit.checkpoint import _first_line
    e = CheckpointException("CheckpointException ranks:", {
        3: (OSError("disk on fire"), traceback.StackSummary()),
        1: (RuntimeError("Cannot access data pointer of Tensor\nmore"),
            traceback.StackSummary())})
    assert _first_line(e) == ("rank 1: RuntimeError: Cannot access data "
                              "pointer of Tensor")
    assert _first_line(ValueError("plain\nsecond")) == "ValueError: plain"


def test_a_checkpoint_that_verifies_but_cannot_load_falls_back(root):
    """Its files match their sums, but DCP cannot read it (its metadata
    written unreadable): set aside with a line, the one before used."""
    import torch
    import torch.distributed.checkpoint as dcp
    from labkit.checkpoint import newest_good_checkpoint
    from labkit.runs.checkpoint import loadable
    state = {"model": {"w": torch.ones(4)}, "optim": {"m": torch.zeros(4)},
             "trainer": {"step": torch.tensor(2)}}
    for step in (2, 4):
        with atomic_step_dir(root, step, META) as tmp:
            dcp.save(state, checkpoint_id=str(tmp), no_dist=True)
            if step == 4:    # unreadable, and its sums say so (verifies)
                (tmp / ".metadata").write_bytes(b"not a pickle")
    assert loadable(root / "step-000002") is None
    said = []
    found, bad = newest_good_checkpoint(root, say=said.append,
                                        loadable=loadable)
    assert found == (2, root / "step-000002") and bad == ["step-000004"]
    assert len(said) == 1 and "\n" not in said[0]
    assert "match their sums, but its DCP metadata cannot be read" \
        in said[0], said
    assert (root / "step-000004.corrupt" / ".metadata").exists()
