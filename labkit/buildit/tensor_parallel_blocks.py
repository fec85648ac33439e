"""What a tensor-parallel rank holds (lab 5's build-it): the layers drawn
from the data's seed, and a rank's share of them.

    full1, full2, x, dy = pair_layers(cfg)    # the column + row pair
    qkv, proj, x, dy = fused_block(cfg)       # the fused-QKV case
    share(cfg, w, r)                          # what rank r is dealt

A rank of a real tensor-parallel job never holds the other ranks' blocks
of a weight. Here each rank gets ``nn.Linear``s of the whole layer's
shape (the student's constructor takes its block, which is the lesson),
with only its own block real and the rest noise, so that the layer's
output reaches it only through the all-reduce (``labkit.buildit.dealt``:
under grading the hub deals the share, from a seed no rank holds).
"""
from __future__ import annotations


def pair_layers(cfg):
    """The column + row pair (h -> 4h -> h), ``x`` and ``dy``."""
    import torch
    from torch import nn

    from labkit.buildit import dealt
    h = cfg["hidden"]
    torch.manual_seed(dealt.seed(cfg))
    full1, full2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)
    x = torch.randn(cfg["tokens"], h)
    dy = torch.randn(cfg["tokens"], h)
    return full1, full2, x, dy


def fused_block(cfg):
    """A fused [q; k; v] projection, the output projection, x and dy."""
    import torch
    from torch import nn

    from labkit.buildit import dealt
    h = cfg["hidden"]
    torch.manual_seed(dealt.seed(cfg) + 7)
    qkv, proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
    return qkv, proj, torch.randn(cfg["tokens"], h), \
        torch.randn(cfg["tokens"], h)


def only(t, r: int, w: int, dim: int, gen, parts: int = 1):
    """``t`` with rank ``r``'s block along ``dim`` (of each of ``parts``
    equal parts) kept and the rest replaced by noise of the same range."""
    import torch
    n = t.shape[dim] // parts
    keep = torch.zeros(t.shape[dim], dtype=torch.bool)
    for p in range(parts):
        keep[p * n + r * (n // w):p * n + (r + 1) * (n // w)] = True
    shape = [1] * t.dim()
    shape[dim] = -1
    noise = (2 * torch.rand(t.shape, generator=gen) - 1) * t.abs().max()
    return torch.where(keep.view(shape), t.detach(), noise)


def share(cfg, w, r) -> list:
    """Rank ``r``'s share (``labkit.buildit.dealt``): the pair's and the
    attention block's weights and biases, each with only this rank's block
    real (column-parallel: its output rows, of each of q, k and v in the
    fused projection; row-parallel: its input columns and the whole bias),
    then ``x, dy`` of each case (the same on every rank)."""
    import torch

    from labkit.buildit import dealt
    with torch.random.fork_rng():
        full1, full2, x, dy = pair_layers(cfg)
        qkv, proj, xa, dya = fused_block(cfg)
    gen = torch.Generator().manual_seed(
        (dealt.seed(cfg) * 1_000_003 + r + 1) % 2 ** 63)
    return [only(full1.weight, r, w, 0, gen), only(full1.bias, r, w, 0, gen),
            only(full2.weight, r, w, 1, gen), full2.bias.detach(), x, dy,
            only(qkv.weight, r, w, 0, gen, 3),
            only(qkv.bias, r, w, 0, gen, 3),
            only(proj.weight, r, w, 1, gen), proj.bias.detach(), xa, dya]


def linear(weight, bias):
    """An ``nn.Linear`` holding ``weight`` and ``bias``."""
    import torch
    from torch import nn
    lin = nn.Linear(weight.shape[1], weight.shape[0])
    with torch.no_grad():
        lin.weight.copy_(weight)
        lin.bias.copy_(bias)
    return lin
