"""labkit.measure.optimizers: the bytes of every optimizer's state, in
one process, are what labkit.predict.optimizers says."""
import pytest

from labkit.measure.optimizers import state_bytes, state_kinds
from labkit.nn.model import GPTConfig, batch, build
from labkit.predict import optimizers as O
from labkit.training.optimizers import make

CONFIG = GPTConfig(hidden=64, layers=2)


def _step(name):
    model = build(CONFIG, seed=0)
    opts = make(name, model)
    x, y = batch(CONFIG, 4, 0)
    model(x, y).backward()
    for opt in opts:
        opt.step()
    return opts


@pytest.mark.parametrize("name", O.OPTIMIZERS)
def test_state_bytes_are_the_ledgers(name):
    opts = _step(name)
    assert state_bytes(opts) == O.state_bytes(
        name, O.gpt_tensors(2, 64, 256, 32), 1)


def test_8bit_states_are_uint8_codes():
    opts = _step("adamw8bit")
    kinds = state_kinds(opts)
    assert {"state1", "absmax1", "qmap1"} <= set(kinds)
