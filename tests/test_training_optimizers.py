"""labkit.training.optimizers in one process: the model's tensors are the
ledger's, and ShardedMuon is torch.optim.Muon."""
import pytest
import torch

from labkit.nn.model import GPTConfig, batch, build
from labkit.predict import optimizers as O
from labkit.training.optimizers import ShardedMuon, make, split

CONFIG = GPTConfig(hidden=64, layers=2)


def _step(name, mode=None):
    model = build(CONFIG, seed=0)
    opts = make(name, model, mode)
    x, y = batch(CONFIG, 4, 0)
    model(x, y).backward()
    for opt in opts:
        opt.step()
    return model, opts


def test_the_ledger_lists_the_models_tensors():
    model = build(CONFIG, seed=0)
    assert [(n, tuple(p.shape)) for n, p in model.named_parameters()] == \
        [(n, s) for n, s, _ in O.gpt_tensors(2, 64, 256, 32)]
    mats, _ = split(model)
    assert len(mats) == sum(m for *_, m in O.gpt_tensors(2, 64, 256, 32))


def test_sharded_muon_is_torch_muon_in_one_process():
    ref, _ = _step("muon")
    got, opts = _step("muon", mode="gather")
    assert isinstance(opts[0], ShardedMuon)
    for (n, a), b in zip(ref.named_parameters(), got.parameters()):
        assert torch.equal(a, b), n
    with pytest.raises(ValueError, match="mode must be"):
        ShardedMuon(list(split(ref)[0]), mode="broadcast")
