"""labkit.buildit.tensor_parallel_blocks: a rank's share holds only its
own blocks of the layers (its output rows of the column-parallel weight,
of each of q, k and v in the fused projection; its input columns of the
row-parallel weight, the whole bias), the rest noise; the ranks' blocks
reassemble the whole layers, and another seed draws other layers."""
import pytest
import torch

from labkit import buildit
from labkit.buildit import tensor_parallel_blocks as B

H = buildit.harness("tensor_parallel")
CFG = {**H.CONFIG, **H.HIDDEN, "data_seed": 4242}
W = buildit.hidden_world("tensor_parallel")


def blocks(t, w, dim, parts=1):
    return [torch.cat([c.chunk(w, dim)[r] for c in t.chunk(parts, dim)],
                      dim) for r in range(w)]


@pytest.mark.parametrize("w", [2, W, 4])
def test_each_rank_holds_its_blocks_and_noise_elsewhere(w):
    full1, full2, x, dy = B.pair_layers(CFG)
    qkv, proj, xa, dya = B.fused_block(CFG)
    cases = [(0, full1.weight, 0, 1), (1, full1.bias, 0, 1),
             (2, full2.weight, 1, 1), (6, qkv.weight, 0, 3),
             (7, qkv.bias, 0, 3), (8, proj.weight, 1, 1)]
    shares = [B.share(CFG, w, r) for r in range(w)]
    for k, t, dim, parts in cases:
        want = blocks(t.detach(), w, dim, parts)
        for r, s in enumerate(shares):
            got = blocks(s[k], w, dim, parts)
            assert torch.equal(got[r], want[r]), (k, r)
            others = [q for q in range(w) if q != r]
            assert all(not torch.equal(got[q], want[q]) for q in others)
            assert s[k].abs().max() <= t.abs().max()
    for r, s in enumerate(shares):    # whole on every rank
        for k, t in [(3, full2.bias), (4, x), (5, dy), (9, proj.bias),
                     (10, xa), (11, dya)]:
            assert torch.equal(s[k], t.detach()), (k, r)


def test_another_seed_draws_other_layers():
    own = B.share({**H.CONFIG, **H.HIDDEN}, W, 0)
    dealt = B.share(CFG, W, 0)
    assert not torch.equal(own[0], dealt[0])
    assert not torch.equal(own[4], dealt[4])


def test_linear_holds_what_it_is_given():
    w, b = torch.randn(3, 5), torch.randn(3)
    lin = B.linear(w, b)
    assert torch.equal(lin.weight, w) and torch.equal(lin.bias, b)
