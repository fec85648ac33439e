"""Activation bytes counted from autograd's saved tensors."""
import torch

from labkit.measure.memory import activation_bytes, saved_activation_bytes
from labkit.nn.model import Block, GPTConfig, build, batch


def test_saved_bytes_of_a_linear_layer():
    lin = torch.nn.Linear(8, 16, bias=False)
    x = torch.randn(4, 8, requires_grad=True)
    # the input (for the weight gradient) and the weight (for the input's)
    assert saved_activation_bytes(lin, x) == 4 * (4 * 8 + 8 * 16)


def test_block_activations_scale_with_the_batch_and_recompute_keeps_input():
    c = GPTConfig()
    blk = Block(c)
    one = activation_bytes(blk, 2, c.seq, c.hidden, "cpu")
    assert activation_bytes(blk, 4, c.seq, c.hidden, "cpu") == 2 * one
    full = activation_bytes(blk, 2, c.seq, c.hidden, "cpu", recompute=True)
    assert full == 4 * 2 * c.seq * c.hidden
    bf16 = activation_bytes(blk, 2, c.seq, c.hidden, "cpu",
                            torch.autocast("cpu", dtype=torch.bfloat16))
    assert full < bf16 < one


def test_recomputed_model_has_the_same_loss_and_gradients():
    c = GPTConfig()
    x, y = batch(c, 4, step=0)
    a, b = build(c), build(c)
    b.recompute = True
    la, lb = a(x, y), b(x, y)
    la.backward()
    lb.backward()
    assert torch.equal(la, lb)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-7)
