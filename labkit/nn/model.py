"""The tiny GPT every lab trains (or its Llama-style twin), and the
synthetic data it learns.

    python -m labkit.nn.model            # prints the default size and one loss
    python -m labkit.nn.model llama      # the Llama-style block at that size

One model: :class:`GPT` is :class:`labkit.nn.decoder.Decoder` built from the
architecture record of a :class:`GPTConfig` (:func:`arch_of`). With
``arch="gpt"`` (the default) that record is the GPT-2 layout -- pre-
LayerNorm, learned positions, GELU MLP of width 4h with biases, one fused
QKV -- with no weight tying, so that the parameter count is the Megatron
formula plus the output layer (:func:`labkit.predict.memory.gpt_params`,
which the tests hold this module to). With ``arch="llama"`` the same
layers, hidden, heads, vocabulary and sequence make the Llama-style block
(GQA with half as many K/V heads, SwiGLU, RMSNorm, RoPE, no biases;
:func:`labkit.arch.llama_shape`). Any other record builds with
:func:`build_arch`.

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
import sys
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn

from labkit.nn.decoder import (MLP, Attention, Block, Decoder,  # noqa: F401
                            Embeddings, Head, recomputed)
from labkit.predict.model.arch import llama_shape  # noqa: F401

ARCHS = ("gpt", "llama")


@dataclass
class GPTConfig:
    vocab: int = 256
    seq: int = 32
    layers: int = 2
    hidden: int = 64
    heads: int = 4
    mlp_ratio: int = 4
    arch: str = "gpt"            # or "llama": the Llama-style block

    def __post_init__(self):
        for k, v in asdict(self).items():
            if k != "arch" and (not isinstance(v, int) or v < 1):
                raise ValueError(f"GPTConfig.{k} must be a positive int, got {v!r}")
        if self.arch not in ARCHS:
            raise ValueError(f"GPTConfig.arch must be one of "
                             f"{', '.join(ARCHS)}, got {self.arch!r}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by "
                             f"heads ({self.heads})")


class GPT(Decoder):
    """The decoder of ``arch_of(c)``; ``config`` keeps the GPTConfig."""

    def __init__(self, c: GPTConfig):
        super().__init__(arch_of(c))
        self.config = c


def build(config: GPTConfig | None = None, seed: int = 0) -> GPT:
    """The same initial weights on every rank, from the seed alone."""
    torch.manual_seed(seed)
    return GPT(config or GPTConfig())


def sharding_units(model: GPT) -> list[nn.Module]:
    """The modules FSDP wraps (or shards) one by one, in forward order.

    With tied embeddings the token table is also the head's weight, and
    one parameter can belong to one FSDP group only: the root then owns
    both ``embed`` and ``head`` (torchtitan's Qwen3 ``apply_fsdp`` leaves
    them to the root the same way), and the blocks are the units.
    """
    if getattr(getattr(model, "arch", None), "tied", False):
        return [*model.blocks]
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
    a = arch_of(config)
    dims = {"vocab": config.vocab, "seq": config.seq, "hidden": config.hidden,
            "3*hidden": 3 * config.hidden,
            "mlp_ratio*hidden": config.mlp_ratio * config.hidden}
    if config.arch == "llama":   # no position table; K/V and SwiGLU widths
        dims = {"vocab": a.vocab, "hidden": a.hidden, "kv_dim": a.kv_dim,
                "ffn": a.ffn}
    bad = [f"{k}={v}" for k, v in dims.items() if v % world_size]
    if bad:
        raise ValueError(f"sizes {', '.join(bad)} do not divide by world size "
                         f"{world_size}: shards would be uneven")


SHAPE = ("layers", "hidden", "heads", "vocab", "seq")


def add_shape_arguments(parser, **defaults) -> None:
    """``--layers --hidden --heads --vocab --seq --arch`` for an entry
    module.

    Defaults are GPTConfig's unless given:
    ``add_shape_arguments(p, layers=8)``.
    """
    for name in SHAPE:
        parser.add_argument(f"--{name}", type=int,
                            default=defaults.get(name,
                                                 getattr(GPTConfig, name)))
    parser.add_argument("--arch", choices=ARCHS,
                        default=defaults.get("arch", GPTConfig.arch))


def config_from_args(args) -> GPTConfig:
    """The GPTConfig named by the flags of :func:`add_shape_arguments`."""
    return GPTConfig(**{name: getattr(args, name) for name in SHAPE},
                     arch=getattr(args, "arch", GPTConfig.arch))


def arch_of(config: GPTConfig):
    """The architecture record of a GPTConfig (:mod:`labkit.arch`)."""
    from labkit import arch
    return arch.of_shape(**asdict(config))


def build_arch(a, seed: int = 0) -> nn.Module:
    """The decoder an architecture record describes (GPT or Llama-style,
    :mod:`labkit.nn.decoder`), the same weights on every rank from the seed."""
    torch.manual_seed(seed)
    return Decoder(a)


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


if __name__ == "__main__":
    c = GPTConfig(arch=sys.argv[1] if len(sys.argv) > 1 else "gpt")
    m = build(c)
    x, y = batch(c, 8, step=0)
    print(f"{c}\nparameters: {count_params(m):,}  "
          f"loss at init: {m(x, y).item():.4f} (ln V = {math.log(c.vocab):.4f})")
