"""Models for the planner: a GPT by its layers, width, heads, sequence and
vocabulary (the standard shapes ``--params`` picks), or any architecture
record with a sequence length (``--hf-config`` / ``--preset``). Both give
the planner one record (:mod:`labkit.predict.model.arch`) to price.

    python -m labkit plan --params 13e9 --gpus 8 --batch 32
    python -m labkit plan --hf-config config.json --seq 8192 --gpus 8192 \
        --gpu h100-80gb --batch 2048 --tp 8 --pp 16

Used by :mod:`labkit.predict.choosing` (``labkit plan``).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from labkit.predict.model import arch as _arch
from labkit.predict.model import flops as _flops


@dataclass(frozen=True)
class Model:
    """Megatron's GPT (Narayanan et al. 2021, Sec. 5.1): tied embeddings,
    no final LayerNorm, learned positions of ``seq`` rows."""
    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int

    @property
    def params(self) -> int:  # Megatron's GPT, Narayanan et al. Eq. 2
        return _flops.megatron_params(self.layers, self.hidden, self.vocab,
                                      self.seq)

    @functools.cached_property
    def arch(self) -> _arch.Arch:
        """Its record: :func:`labkit.predict.model.arch.gpt`, tied, no final
        norm (the count is :attr:`params`); built once per model (the
        planner reads it for every stage of every layout it prices)."""
        return _arch.gpt(self.layers, self.hidden, self.heads, self.vocab,
                         self.seq, tied=True, final_norm=False)

    def model_flops(self, batch: int) -> float:
        """Narayanan et al. 2021, Eq. 3 (the record's count on the GPT:
        :func:`labkit.predict.model.flops_arch.arch_flops`; the tests hold it)."""
        return _flops.model_flops(batch, self.seq, self.layers, self.hidden,
                                  self.vocab)

    def hardware_flops(self, batch: int, recompute: str) -> float:
        return _flops.hardware_flops(batch, self.seq, self.layers,
                                     self.hidden, self.vocab, recompute)


@dataclass(frozen=True)
class ArchModel:
    """Any record (:class:`labkit.predict.model.arch.Arch`) trained on ``seq``
    tokens per sequence: GQA, SwiGLU, an untied 128K vocabulary..."""
    arch: _arch.Arch
    seq: int

    def __post_init__(self):
        if (not isinstance(self.seq, int) or isinstance(self.seq, bool)
                or self.seq < 1):
            raise ValueError(f"seq must be a positive integer, got "
                             f"{self.seq!r}")
        if self.arch.positions == "learned" and self.seq > self.arch.max_seq:
            raise ValueError(f"seq {self.seq} is longer than the "
                             f"{self.arch.max_seq} learned positions")

    layers = property(lambda self: self.arch.layers)
    hidden = property(lambda self: self.arch.hidden)
    heads = property(lambda self: self.arch.heads)
    vocab = property(lambda self: self.arch.vocab)

    @property
    def params(self) -> int:
        from labkit.predict.model import params as P
        return P.total(self.arch)

    def model_flops(self, batch: int) -> float:
        from labkit.predict.model.flops_arch import arch_flops
        return arch_flops(self.arch, batch, self.seq)["model_flops"]

    def hardware_flops(self, batch: int, recompute: str) -> float:
        from labkit.predict.model.flops_arch import arch_flops
        return arch_flops(self.arch, batch, self.seq,
                          recompute)["hardware_flops"]


def _gpt(name: str) -> Model:
    a = _arch.preset(name)
    return Model(a.layers, a.hidden, a.heads, a.max_seq, a.vocab)


# Standard shapes for --params, the record's GPT presets: GPT-3 (Brown et
# al. 2020, Table 2.1) and Llama 2's sizes (Touvron et al. 2023, Table 1)
# as MHA + 4h MLP GPTs -- the count differs from the SwiGLU/GQA original
# by a few per cent; ``--preset llama2-70b`` is the real one.
SHAPES = {
    1.3e9: _gpt("gpt-1.3b"),
    2.7e9: _gpt("gpt-2.7b"),
    6.7e9: _gpt("gpt-6.7b"),
    13e9: _gpt("gpt-13b"),
    30e9: _gpt("gpt-30b"),
    70e9: _gpt("gpt-70b"),
    175e9: _gpt("gpt-175b"),
}


def standard_model(params: float) -> Model:
    """The standard shape closest to ``params`` (within 15 per cent)."""
    if not params > 0:
        raise ValueError(f"--params must be positive, got {params!r}")
    best = min(SHAPES, key=lambda p: abs(math.log(p / params)))
    if abs(best / params - 1) > 0.15:
        raise ValueError(
            f"no standard shape near {params:.3g} parameters (known: "
            f"{', '.join(f'{p:.3g}' for p in SHAPES)}); give --layers "
            "--hidden --heads --seq --vocab")
    return SHAPES[best]
