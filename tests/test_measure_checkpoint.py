"""The bytes of a DCP folder and a torch.save file add up, item by item."""
import shutil

import torch
import torch.distributed.checkpoint as dcp

from labkit.checkpoint import checkpoint_root
from labkit.measure.checkpoint import dcp_bytes, torch_save_bytes
from labkit.nn.model import GPTConfig, build, count_params
from labkit.predict.checkpoint import checkpoint_bytes
from labkit.training.train import make_optimizer, train_step
from labkit.nn.model import batch


def _trained():
    model = build(GPTConfig())
    opt = make_optimizer(model)
    train_step(model, opt, *batch(GPTConfig(), 8, 0))
    return model, opt


def test_dcp_one_process_closes_exactly():
    model, opt = _trained()
    out = checkpoint_root("test-measure-dcp")
    shutil.rmtree(out, ignore_errors=True)
    state = {"model": model.state_dict(), "optim": opt.state_dict(),
             "trainer": {"step": torch.tensor(1)}}
    dcp.save(state, checkpoint_id=str(out))
    m = dcp_bytes(out)
    psi = count_params(model)
    assert m["state"] == {0: checkpoint_bytes(psi, 1, "ddp", "fp32")[0]}
    assert m["files"][0] == m["state"][0] + m["framing"][0] + m["small"][0]
    assert m["small"][0] > 0 and ".metadata" in m["other_files"]
    shutil.rmtree(out)


def test_torch_save_full_state():
    model, opt = _trained()
    out = checkpoint_root("test-measure-torch-save")
    out.mkdir(parents=True, exist_ok=True)
    f = out / "full.pt"
    torch.save({"model": model.state_dict(), "optim": opt.state_dict()}, f)
    m = torch_save_bytes(f)
    assert m["state"] == 12 * count_params(model)
    assert m["file"] == m["state"] + m["overhead"] and m["overhead"] > 0
    shutil.rmtree(out)
