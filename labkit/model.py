"""The tiny GPT every lab trains, and the synthetic data it learns.

    python -m labkit.model            # prints the default size and one loss

Any architecture record (the Llama-style block too) builds with
:func:`build_arch` (:mod:`labkit.decoder`); this GPT is the record's
``gpt-tiny`` preset (:func:`arch_of`).

A decoder-only transformer in the GPT-2 layout (pre-LayerNorm, learned
positions, GELU MLP of width 4h), with no weight tying so that the parameter
count is the Megatron formula plus the output layer (see
:func:`labkit.predict.memory.gpt_params`, which the tests hold this module to).

The model is split into three kinds of child modules -- ``embed``, each of
``blocks`` and ``head`` -- and the root holds no parameter of its own. Those
children are the natural units for FSDP wrapping (:func:`sharding_units`), and
with nothing left at the root, "resharded after forward" means every unit.

The data is a learnable synthetic language: each sequence is an arithmetic
progression modulo the vocabulary, ``t[i+1] = t[i] + k (mod V)`` with a random
start and a random stride ``k`` in 1..8. The loss falls in a few steps, and
every rank can build the same global batch from ``(seed, step)`` alone.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab: int = 256
    seq: int = 32
    layers: int = 2
    hidden: int = 64
    heads: int = 4
    mlp_ratio: int = 4

    def __post_init__(self):
        for k, v in asdict(self).items():
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"GPTConfig.{k} must be a positive int, got {v!r}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by "
                             f"heads ({self.heads})")


class Embeddings(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.tok = nn.Embedding(c.vocab, c.hidden)
        self.pos = nn.Embedding(c.seq, c.hidden)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.tok(idx) + self.pos(pos)


class Attention(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.heads = c.heads
        self.qkv = nn.Linear(c.hidden, 3 * c.hidden)
        self.proj = nn.Linear(c.hidden, c.hidden)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2)
                   for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, s, h))


class MLP(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(c.hidden, c.mlp_ratio * c.hidden)
        self.proj = nn.Linear(c.mlp_ratio * c.hidden, c.hidden)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(c.hidden)
        self.attn = Attention(c)
        self.ln2 = nn.LayerNorm(c.hidden)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Head(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.ln_f = nn.LayerNorm(c.hidden)
        self.out = nn.Linear(c.hidden, c.vocab, bias=False)

    def forward(self, x):
        return self.out(self.ln_f(x))


class GPT(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.config = c
        self.embed = Embeddings(c)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.head = Head(c)
        self.apply(_init)

    recompute = False  # full activation recomputation, block by block

    def forward(self, idx, targets=None):
        x = self.embed(idx)
        for block in self.blocks:
            x = recomputed(block, x) if self.recompute else block(x)
        logits = self.head(x)
        if targets is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def recomputed(block: nn.Module, x):
    """``block(x)`` keeping only its input for backward; the forward runs
    again during backward (full recomputation, Korthikanti et al. 2022,
    Sec. 5: 2 s b h bytes per layer in 16-bit instead of 34 s b h + ...)."""
    from torch.utils.checkpoint import checkpoint
    if not torch.is_grad_enabled():
        return block(x)
    return checkpoint(block, x, use_reentrant=False)


def _init(m):
    if isinstance(m, (nn.Linear, nn.Embedding)):
        nn.init.normal_(m.weight, std=0.02)
        if getattr(m, "bias", None) is not None:
            nn.init.zeros_(m.bias)


def build(config: GPTConfig | None = None, seed: int = 0) -> GPT:
    """The same initial weights on every rank, from the seed alone."""
    torch.manual_seed(seed)
    return GPT(config or GPTConfig())


def sharding_units(model: GPT) -> list[nn.Module]:
    """The modules FSDP wraps (or shards) one by one, in forward order."""
    return [model.embed, *model.blocks, model.head]


def batch(config: GPTConfig, batch_size: int, step: int, seed: int = 0,
          device="cpu"):
    """The global batch of step ``step``: inputs and next-token targets."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    start = torch.randint(0, config.vocab, (batch_size, 1), generator=g)
    stride = torch.randint(1, 9, (batch_size, 1), generator=g)
    tokens = (start + stride * torch.arange(config.seq + 1)) % config.vocab
    return tokens[:, :-1].to(device), tokens[:, 1:].to(device)


def local_batch(x, y, rank: int, world_size: int):
    """This rank's equal slice of a global batch (data parallelism)."""
    if x.shape[0] % world_size:
        raise ValueError(f"global batch {x.shape[0]} is not divisible by "
                         f"world size {world_size}")
    n = x.shape[0] // world_size
    return x[rank * n:(rank + 1) * n], y[rank * n:(rank + 1) * n]


def rank_batches(config: GPTConfig, batch_size: int, ctx, steps: int,
                 seed: int = 0, start: int = 0) -> list:
    """This rank's slices of the global batches of steps start..start+steps."""
    return [local_batch(*batch(config, batch_size, s, seed, device=ctx.device),
                        ctx.rank, ctx.world_size)
            for s in range(start, start + steps)]


def check_shardable(config: GPTConfig, world_size: int) -> None:
    """Every parameter's first dimension must split evenly over the ranks.

    FSDP shards each parameter along dim 0; when a size does not divide,
    FSDP2 makes uneven shards and FSDP1 pads, and per-rank bytes no longer
    equal Psi / N exactly. The labs ask for exact shards, so they say so
    before anything starts.
    """
    dims = {"vocab": config.vocab, "seq": config.seq, "hidden": config.hidden,
            "3*hidden": 3 * config.hidden,
            "mlp_ratio*hidden": config.mlp_ratio * config.hidden}
    bad = [f"{k}={v}" for k, v in dims.items() if v % world_size]
    if bad:
        raise ValueError(f"sizes {', '.join(bad)} do not divide by world size "
                         f"{world_size}: shards would be uneven")


SHAPE = ("layers", "hidden", "heads", "vocab", "seq")


def add_shape_arguments(parser, **defaults) -> None:
    """``--layers --hidden --heads --vocab --seq`` for an entry module.

    Defaults are GPTConfig's unless given:
    ``add_shape_arguments(p, layers=8)``.
    """
    for name in SHAPE:
        parser.add_argument(f"--{name}", type=int,
                            default=defaults.get(name,
                                                 getattr(GPTConfig, name)))


def config_from_args(args) -> GPTConfig:
    """The GPTConfig named by the flags of :func:`add_shape_arguments`."""
    return GPTConfig(**{name: getattr(args, name) for name in SHAPE})


def arch_of(config: GPTConfig):
    """The architecture record of a GPTConfig (:mod:`labkit.arch`)."""
    from labkit import arch
    return arch.gpt(config.layers, config.hidden, config.heads,
                    config.vocab, config.seq, config.mlp_ratio)


def build_arch(a, seed: int = 0) -> nn.Module:
    """The decoder an architecture record describes (GPT or Llama-style,
    :mod:`labkit.decoder`), the same weights on every rank from the seed."""
    from labkit.decoder import Decoder
    torch.manual_seed(seed)
    return Decoder(a)


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


if __name__ == "__main__":
    c = GPTConfig()
    m = build(c)
    x, y = batch(c, 8, step=0)
    print(f"{c}\nparameters: {count_params(m):,}  "
          f"loss at init: {m(x, y).item():.4f} (ln V = {math.log(c.vocab):.4f})")
