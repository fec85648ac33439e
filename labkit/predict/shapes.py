"""Model shapes for the planner: a GPT by its layers, width, heads,
sequence and vocabulary, and the standard shapes ``--params`` picks.

    python -m labkit plan --params 13e9 --gpus 8 --batch 32

Used by :mod:`labkit.predict.choosing` (``labkit plan``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.predict import flops as _flops


@dataclass(frozen=True)
class Model:
    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int

    @property
    def params(self) -> int:  # Megatron's GPT, Narayanan et al. Eq. 2
        return _flops.megatron_params(self.layers, self.hidden, self.vocab,
                                      self.seq)


# Standard shapes for --params: GPT-3 (Brown et al. 2020, Table 2.1) and
# Llama 2 (Touvron et al. 2023, Table 1; MHA + 4h MLP: the count differs
# from the SwiGLU/GQA original by a few per cent).
SHAPES = {
    1.3e9: Model(24, 2048, 16, 2048, 51200),
    2.7e9: Model(32, 2560, 32, 2048, 51200),
    6.7e9: Model(32, 4096, 32, 2048, 51200),
    13e9: Model(40, 5120, 40, 4096, 32000),
    30e9: Model(60, 6656, 52, 2048, 32000),
    70e9: Model(80, 8192, 64, 4096, 32000),
    175e9: Model(96, 12288, 96, 2048, 51200),
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
