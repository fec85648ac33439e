"""FSDP x TP on a device mesh for any architecture record: the TP-local
parameter shapes of each FSDP unit, bytes per rank, bytes per mesh
dimension (pure Python; :mod:`labkit.predict.mesh` is the same for the
course's GPT, and on the GPT preset the two agree, shape for shape).

    from labkit.predict.model import arch
    from labkit.predict.mesh import arch as MA
    a = arch.preset("llama3-8b")
    MA.rank_param_bytes(a, dp=2, tp=4, bytes_per_param=2)
    MA.step_comm(a, seq=4096, dp=2, tp=4, micro_batch=1,
                 sequence_parallel=True, bytes_per_element=2)

The block splits as Megatron-LM splits it (Shoeybi et al. 2019, Sec. 3):
Q, K, V, the MLP's first layer(s) (GELU's fc, SwiGLU's gate and up)
column-parallel, the attention output and the MLP's last layer
row-parallel, norms and row-parallel biases whole. Under grouped-query
attention (Ainslie et al. 2023) K and V are ``kv_heads x head_dim`` wide
and split by heads; with ``t > kv_heads`` each rank holds one whole K/V
head (:func:`labkit.predict.tensor_parallel.gqa.kv_split`). The embedding
and the head stay whole in "tp", as in :mod:`labkit.predict.mesh`.
Per-head Q/K norms (Qwen3: one ``head_dim`` RMSNorm weight each for the
queries and the keys, shared by every head) are whole on every rank; each
rank normalizes only its own heads, so their gradients are partial sums
all-reduced in "tp", as the sequence-parallel norms' are.
"""
from __future__ import annotations

from labkit.predict import mesh as _mesh
from labkit.predict.model import params as _params
from labkit.predict.sharding import calls as _calls
from labkit.predict.tensor_parallel.gqa import kv_split, layer_params

COLUMN = ("q_proj", "k_proj", "v_proj", "fc", "gate_proj", "up_proj")
ROW = ("o_proj", "proj", "down_proj")


def _local(name: str, shape: tuple, a, tp: int) -> tuple:
    """One tensor's TP-local shape (``nn.Linear`` weights are [out, in])."""
    module = name.split(".")[-2]
    if module in ("k_proj", "v_proj") and tp > a.kv_heads:
        return (a.head_dim,) + shape[1:]     # one whole K/V head
    if module in COLUMN:
        return (shape[0] // tp,) + shape[1:]
    if module in ROW and name.endswith("weight"):
        return (shape[0], shape[1] // tp)
    return shape


def unit_shapes(a, tp: int) -> list[list[tuple]]:
    """The TP-local parameter shapes of each FSDP unit, in order:
    embedding (tokens; learned positions), every block, head (final norm;
    the output layer unless tied)."""
    if a.experts:
        raise ValueError("the mesh ledger covers dense blocks")
    layer_params(a, tp)       # one clear error if tp cannot split it
    embed = [(a.vocab, a.hidden)]
    if a.positions == "learned":
        embed.append((a.max_seq, a.hidden))
    blocks = [[_local(n, s, a, tp) for n, s, _ in
               _params.layer_tensors(a, i)] for i in range(a.layers)]
    head = [(a.hidden,)] * (2 if a.norm == "layernorm" else 1)
    head = head if a.final_norm else []
    if not a.tied:
        head = head + [(a.vocab, a.hidden)]
    return [embed] + blocks + [head]


def rank_param_bytes(a, dp: int, tp: int, bytes_per_param: int = 4) -> float:
    """Parameter bytes one rank holds: TP-local, then divided by ``dp``
    (exactly when every first dimension divides; FSDP2 pads otherwise,
    :func:`fsdp_rank_param_bytes`)."""
    n = sum(_params.numel(s) for u in unit_shapes(a, tp) for s in u)
    return n * bytes_per_param / dp


def fsdp_rank_param_bytes(a, dp: int, tp: int,
                          bytes_per_param: int = 4) -> float:
    """The same, with FSDP2's padding of every parameter's first dim."""
    return sum(_calls.fsdp_unit_numel(u, dp) for u in unit_shapes(a, tp)) \
        * bytes_per_param / dp


def kv_grad_comm(a, dp: int, tp: int, grad_bytes: int = 4) -> dict:
    """``{"all_reduce": {"calls", "bytes"}}`` of the K/V replicas'
    gradients when ``tp > kv_heads`` (``{}`` otherwise): every layer's K
    and V weights (and biases), one whole head each, summed over the
    ``tp / kv_heads`` ranks holding copies
    (:func:`labkit.predict.tensor_parallel.gqa.kv_split`;
    neuronx-distributed sums the same copies over its
    ``get_kv_shared_group``). Under FSDP each
    rank sums its ``1/dp`` shard of the gradient, after the
    reduce-scatter: ``2 d (h + bias) / dp`` elements per layer."""
    if tp == 1 or kv_split(a, tp)["replicas"] == 1:
        return {}
    per = [a.head_dim * a.hidden] + [a.head_dim] * a.qkv_bias
    calls = 2 * len(per) * a.layers
    nbytes = 2 * a.layers * sum(n // dp for n in per) * grad_bytes
    return {"all_reduce": {"calls": calls, "bytes": nbytes}}


def kv_replica_bytes(a, dp: int, tp: int, bytes_per_param: int = 4) -> float:
    """Bytes one rank holds beyond its ``1/t`` share of the K/V layers
    because ``tp > kv_heads`` replicates them (0 otherwise): every
    layer's ``kv_replicated_bytes16`` at ``bytes_per_param``, FSDP-sharded
    over ``dp``."""
    extra16 = layer_params(a, tp)["kv_replicated_bytes16"]
    return a.layers * extra16 / 2 * bytes_per_param / dp


def step_comm(a, seq: int, dp: int, tp: int, micro_batch: int,
              sequence_parallel: bool = False, bytes_per_element: int = 4,
              grad_bytes: int | None = None) -> dict:
    """``{"tp": {...}, "dp": {...}}``: what one rank sends in one step.
    Inside "tp" the activations are ``b x s x hidden`` whatever the KV
    heads (GQA narrows K/V, not the residual stream); inside "dp" FSDP's
    calls on the TP-local units of the record; with ``tp > kv_heads``
    also the K/V replicas' gradient all-reduce (:func:`kv_grad_comm`),
    counted inside "tp" (its groups are parts of a "tp" group); with
    Q/K norms the all-reduce of their partial gradients (predicted, not
    measured: lab 10's run has no Q/K norms)."""
    norms = 2 * (2 if a.norm == "layernorm" else 1)
    tp_part = _mesh.tp_comm(a.layers, micro_batch, seq, a.hidden, tp,
                            sequence_parallel, bytes_per_element, norms)
    if tp > 1 and a.qk_norm:    # Q/K norm weights: partial over heads
        d = tp_part.setdefault("all_reduce", {"calls": 0, "bytes": 0})
        d["calls"] += 2 * a.layers
        d["bytes"] += 2 * a.layers * a.head_dim * bytes_per_element
    for op, v in kv_grad_comm(a, dp, tp, bytes_per_element
                              if grad_bytes is None else grad_bytes).items():
        d = tp_part.setdefault(op, {"calls": 0, "bytes": 0})
        d["calls"] += v["calls"]
        d["bytes"] += v["bytes"]
    dp_part = {} if dp == 1 else _calls.summarize(_calls.predict_calls(
        unit_shapes(a, tp), dp, "full_shard", bytes_per_element,
        grad_bytes))
    return {"tp": tp_part, "dp": dp_part}
