"""Pipeline partitions: how many layers each stage holds, even or not.

    python -m labkit plan --layers 70 --hidden 14336 --heads 112 --seq 2048 \\
        --vocab 250880 --batch 2048 --gpus 384 --gpu a100-80gb \\
        --recompute full --tp 4 --pp 12
    python -m labkit plan ... --pp 4 --partition 5,6,6,5

Real layouts rarely divide evenly. BLOOM-176B ran 70 layers on 12 stages
(Le Scao et al. 2022, Sec. 3.4.1; Megatron-DeepSpeed balances the layers
over the stages); Llama 3 405B ran 126 layers on 16 stages and took "one
Transformer layer each from the first and the last stages" because those
also hold the embedding and the output layer (Dubey et al. 2024, Sec.
3.3.2); Megatron-LM spells that ``--decoder-first-pipeline-num-layers`` and
``--decoder-last-pipeline-num-layers``.

The rule here: ``ceil(L/p)`` layers per stage, and the stages that must hold
fewer are taken from the ends inward (first, last, second, second to last,
...), the ends being the stages that also hold the embedding and the head.
A stage's memory is then its own: its layers, the embedding on the first,
the (tied copy of the) output layer and the logits on the last, and the
micro-batches 1F1B keeps in flight there, ``min(p - i, m)`` on stage ``i``
(Narayanan et al. 2021, Sec. 2.2.1). The heaviest stage sets the memory;
the slowest (most layers) sets the pipeline's pace.
"""
from __future__ import annotations

import math


def partition(layers: int, stages: int, first: int | None = None,
              last: int | None = None) -> tuple[int, ...]:
    """Layers per stage, the first stage first.

    ``first`` / ``last`` pin the end stages (Megatron-LM's
    ``--decoder-first/last-pipeline-num-layers``); the other stages share
    the rest by the same rule.
    """
    for name, v in (("layers", layers), ("stages", stages)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if stages > layers:
        raise ValueError(f"pp={stages} stages for {layers} layers: a stage "
                         "without a layer")
    if stages == 1:
        if first not in (None, layers) or last not in (None, layers):
            raise ValueError("one stage holds every layer")
        return (layers,)
    pinned = {}
    if first is not None:
        pinned[0] = first
    if last is not None:
        pinned[stages - 1] = last
    for i, v in pinned.items():
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"a stage needs >= 1 layer, got {v!r}")
    free = [i for i in range(stages) if i not in pinned]
    rest = layers - sum(pinned.values())
    if rest < len(free) or (not free and rest):
        raise ValueError(f"first/last stage layers {pinned} leave {rest} "
                         f"layers for {len(free)} stages")
    parts = dict(pinned)
    if free:
        top = math.ceil(rest / len(free))
        short = top * len(free) - rest
        # the ends inward: free[0], free[-1], free[1], free[-2], ...
        order = [free[(k // 2) if k % 2 == 0 else -(k // 2) - 1]
                 for k in range(len(free))]
        for i in free:
            parts[i] = top
        for i in order[:short]:
            parts[i] -= 1
    return tuple(parts[i] for i in range(stages))


def parse(text: str) -> tuple[int, ...]:
    """``"5,6,6,5"`` -> ``(5, 6, 6, 5)``, one clear error otherwise."""
    try:
        parts = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"--partition must be layers per stage, e.g. "
                         f"5,6,6,5; got {text!r}") from None
    if any(x < 1 for x in parts):
        raise ValueError(f"every stage needs >= 1 layer: {text!r}")
    return parts


def check(parts, layers: int) -> tuple[int, ...]:
    parts = tuple(parts)
    if sum(parts) != layers or any(x < 1 for x in parts):
        raise ValueError(f"partition {'+'.join(map(str, parts))} = "
                         f"{sum(parts)} layers, the model has {layers}")
    return parts


def in_flight(stages: int, microbatches: int, stage: int) -> int:
    """Micro-batches whose activations stage ``stage`` holds at its peak
    under 1F1B: ``min(p - i, m)`` (the first stage: ``min(p, m)``, as
    :func:`labkit.predict.pipeline_parallel.first_stage_activations`)."""
    return min(stages - stage, microbatches)


def label(parts) -> str:
    """``(5, 6, 6, 6, 5)`` -> ``"5+6x3+5"``: runs of equal stages."""
    out, i = [], 0
    while i < len(parts):
        j = i
        while j < len(parts) and parts[j] == parts[i]:
            j += 1
        out.append(str(parts[i]) if j - i == 1 else f"{parts[i]}x{j - i}")
        i = j
    return "+".join(out)
