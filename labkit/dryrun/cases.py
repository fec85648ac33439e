"""The dry run's registry: a :class:`Case`, and the adapters by lab.

    from labkit.dryrun.cases import Case, lab, cannot

An adapter module (``labs.py``, ``fit_lab.py``, ``mesh_lab.py``)
registers its function with :func:`lab` and imports only this file;
``labs.py`` imports the adapter modules, so the registry is full once
``labkit.dryrun.labs`` is imported (no import circle).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from labkit.nn.model import GPTConfig
from labkit.predict.memory import (activation_bytes_per_layer, gpt_params,
                                   ledger)
from labkit.training.wrap import ZERO_EQUIVALENT

ADAPTERS: dict[str, Callable[[dict], list]] = {}
REASONS: dict[str, str] = {}


@dataclass
class Case:
    lab: str
    variant: str
    role: str
    world_size: int
    rank: int
    setup: Callable = field(repr=False)
    predicted: dict = field(default_factory=dict)
    key: tuple = ()  # equal keys: the same run, dry-run once


def lab(name: str):
    def register(fn):
        ADAPTERS[name] = fn
        return fn
    return register


def cannot(name: str, reason: str) -> None:
    REASONS[name] = reason


def gpt_config(m: dict) -> GPTConfig:
    return GPTConfig(**{k: m[k] for k in ("layers", "hidden", "heads",
                                          "vocab", "seq")})


def predicted(c: GPTConfig, strategy: str, world: int, micro_batch: int,
              bf16: bool, shard_group: int | None = None) -> dict:
    """The ledger (fp32 weights and Adam: 16 bytes per parameter, ZeRO
    Sec. 3.1) and Korthikanti et al. 2022's activations (Table 2)."""
    psi = gpt_params(c.layers, c.hidden, c.heads, c.vocab, c.seq)
    zero = ZERO_EQUIVALENT[strategy]
    kw = {"shard_group": shard_group} if zero == "hybrid_shard" else {}
    led = ledger(psi, world, zero, precision="fp32", **kw)
    act = c.layers * activation_bytes_per_layer(c.seq, micro_batch,
                                                c.hidden, c.heads)
    act *= 1 if bf16 else 2  # Table 2 counts 16-bit activations
    return {"params": led.params_gpu, "grads": led.grads_gpu,
            "optimizer": led.optimizer_gpu, "gathered": led.transient_gpu,
            "activations": act, "states": led.params_gpu + led.grads_gpu
            + led.optimizer_gpu, "total": led.gpu_total + act}


