"""What one GPU of each pipeline stage of a mixture-of-experts layout holds
(pure Python): the ``stages`` of ``labkit plan --json`` for a record with
experts (:mod:`labkit.predict.choosing.plan_moe`).

    python -m labkit plan --hf-config deepseek-v3.json --gpus 2048 \\
        --gpu h800-80gb --batch 15360 --seq 4096 --pp 16 --ep 64 --json

Stage ``i`` holds the layers :func:`labkit.predict.pipeline_parallel.partition.partition`
gives it (the dense planner's rule: ``ceil(L / p)``, the short stages
taken from the ends inward), and every layer is counted from the record's
own tensors (:func:`labkit.predict.model.params.layer_tensors`): DeepSeek-V3's
three dense layers first, then MoE layers with their router, shared
expert and ``E`` routed experts. On one GPU:

- the non-expert weights ``D / tp`` (attention, norms, router, shared
  experts, dense MLPs; the word embedding on the first stage, the final
  norm and the output layer on the last,
  :func:`labkit.predict.pipeline_parallel.stage_bytes.end_params`), replicated ``dp cp``
  times;
- the routed experts ``E / ep`` per MoE layer (``/ tp``), replicated
  ``dp cp / ep`` times;
- bytes as :func:`labkit.predict.choosing.plan_moe.layout` prices them: bf16
  weights and gradients (2 + 2 per parameter) and ZeRO-1's fp32 master
  and Adam moments (12) over each weight's replicas (Rajbhandari et al.
  2020, Sec. 3.1); full recomputation's ``2 (s / cp) b h`` per layer and
  micro-batch in flight, ``min(p - i, m)`` on stage ``i`` under 1F1B
  (Narayanan et al. 2021, Sec. 2.2.1); one MoE layer's dispatch buffers
  where the stage has one; ring attention's two K/V blocks with CP.

The layout's own ``total_gb`` stays the planner's quick estimate (each
of ``ceil(L / p)`` layers the heavier kind, one end: above every stage of
DeepSeek-V3's PP16, but one end short where one stage holds both, ``pp =
1``); these are the stages' own numbers. At
``tp = 1`` (DeepSeek-V3's published layout) the parameters are exact: the
stages of an untied model hold the record's total once, experts ``ep``
times over.
"""
from __future__ import annotations

from labkit.predict.model import params as P
from labkit.predict.pipeline_parallel import partition as _part
from labkit.predict.pipeline_parallel import stage_bytes as _sb

EXPERT = ".mlp.experts."     # a routed expert's tensors (params' names)


def layer_split(a, i: int) -> tuple[int, int]:
    """``(non-expert, routed experts)`` parameters of layer ``i``."""
    ts = P.layer_tensors(a, i)
    experts = sum(P.numel(s) for n, s, _ in ts if EXPERT in n)
    return sum(P.numel(s) for _, s, _ in ts) - experts, experts


def stage_params(a, tp: int, ep: int, parts, stage: int) -> dict:
    """Parameters on one GPU of stage ``stage``: ``dense`` (non-expert),
    ``experts`` (its ``E / ep`` of each MoE layer), their sum
    ``param_count``, and the stage's ``first_layer`` and ``moe_layers``."""
    first = sum(parts[:stage])
    dense = experts = moe = 0
    for i in range(first, first + parts[stage]):
        d, e = layer_split(a, i)
        dense, experts, moe = dense + d, experts + e, moe + (e > 0)
    dense += _sb.end_params(a, 1, len(parts), stage)
    dense, experts = dense / tp, experts / ep / tp
    return {"first_layer": first, "moe_layers": moe, "dense": dense,
            "experts": experts, "param_count": dense + experts}


def stage_memory(a, lay: dict, parts, stage: int, seq: int,
                 micro_batch: int, global_batch: int) -> dict:
    """Bytes per GPU on stage ``stage`` of a :func:`plan_moe.layout`
    layout (``params``, ``grads``, ``optimizer``, ``activations``,
    ``dispatch``; ``total`` is their sum)."""
    tp, cp, dp, ep = lay["tp"], lay["cp"], lay["dp"], lay["ep"]
    w = stage_params(a, tp, ep, parts, stage)
    reps = dp * cp
    s = seq // cp
    microbatches = global_batch // (dp * micro_batch)
    act = (_part.in_flight(len(parts), microbatches, stage) * parts[stage]
           * 2 * s * micro_batch * a.hidden)
    if cp > 1:                   # ring attention: the K/V block and the next
        act += 2 * (2 * micro_batch * s * a.kv_dim * 2)
    dispatch = (2 * a.top_k * s * micro_batch * a.hidden * 2
                if w["moe_layers"] else 0)
    sharded = w["dense"] / reps + w["experts"] / (reps // ep)
    z = lay.get("zero", 1)      # FSDP: weights (3) and gradients (2, 3)
    out = {"params": 2 * (sharded if z == 3 else w["param_count"]),
           "grads": 2 * (sharded if z >= 2 else w["param_count"]),
           "optimizer": 12 * sharded,
           "activations": act, "dispatch": dispatch}
    out["total"] = sum(out.values())
    return out


def stage_report(a, lay: dict, seq: int, micro_batch: int,
                 global_batch: int) -> list:
    """Every stage of ``lay``: its index, layers, parameters on one GPU and
    its bytes -- what ``labkit plan --json`` lists under ``stages``."""
    parts = _part.partition(a.layers, lay["pp"])
    return [{"stage": i, "layers": n,
             **stage_params(a, lay["tp"], lay["ep"], parts, i),
             **stage_memory(a, lay, parts, i, seq, micro_batch,
                            global_batch)}
            for i, n in enumerate(parts)]
