"""2-D parallelism, FSDP over "dp" x TP over "tp": bytes per rank, bytes
per mesh dimension (pure Python).

    from labkit.predict import mesh as M
    M.rank_param_bytes(vocab=256, seq=32, layers=2, hidden=64, dp=2, tp=2)
    M.step_comm(256, 32, 2, 64, dp=2, tp=2, micro_batch=4,
                sequence_parallel=True)   # {"tp": {op: ...}, "dp": {...}}

The layout is torchtitan's (``parallelize_llama``): tensor parallelism
inside each block as chapter 5 derives it (Q, K, V and the MLP's first
layer column-parallel, the two output projections row-parallel; Shoeybi
et al. 2019, Sec. 3), optionally sequence parallel between them
(Korthikanti et al. 2022, Sec. 4.2.2), then FSDP2 (``fully_shard``) over
the data-parallel dimension on each unit (embedding, every block, head).
The embedding and the head stay whole in "tp" (FSDP still shards them in
"dp"); with sequence parallelism the activations between them are split
along the sequence.

Memory: TP divides a block's matrices by ``t`` (LayerNorms and the
row-parallel biases stay whole:
:func:`labkit.predict.tensor_parallel.layer_params`), FSDP divides
everything again by ``d``.

Communication per step and per rank (payload bytes, as
:class:`labkit.measure.collectives.CollectiveCounter` records them):

- inside "tp", per layer and micro-batch, the collectives of
  :func:`labkit.predict.tensor_parallel.collective_calls` on the local
  ``b x s x h`` activation; with sequence parallelism also one all-gather
  of it before the head (forward) and one after the embedding (backward:
  the gradient of the sequence shards), and the gradients of the
  sequence-parallel LayerNorms, partial sums over the shards, all-reduced
  (``4 h`` elements per layer);
- inside "dp", FSDP's calls of :mod:`labkit.predict.sharding.calls` on the
  TP-local parameters: every unit all-gathered before its forward and
  again before its backward, its gradients reduce-scattered (ZeRO-3,
  ``3 Phi`` with ``Phi`` now the TP-local size).

The folder: ``arch`` (any architecture record on the mesh), which
imports this ``__init__``; this never imports it. Pure Python.
"""
from __future__ import annotations

from labkit.predict.sharding import calls as _calls
from labkit.predict import tensor_parallel as _tp


def unit_shapes(vocab: int, seq: int, layers: int, hidden: int, tp: int,
                mlp_ratio: int = 4) -> list[list[tuple]]:
    """The TP-local parameter shapes of each FSDP unit, in order.

    Embedding (token, position), each block (LayerNorm, Q, K, V, attention
    out, LayerNorm, MLP in, MLP out: weights and biases), head (LayerNorm,
    output layer); ``nn.Linear`` weights are ``[out, in]``.
    """
    _tp._positive(vocab=vocab, seq=seq, layers=layers, hidden=hidden,
                  tp=tp, mlp_ratio=mlp_ratio)
    h, w = hidden, mlp_ratio * hidden
    if h % tp or w % tp:
        raise ValueError(f"hidden {h} and MLP width {w} must divide by "
                         f"tp={tp}")
    ln = [(h,), (h,)]
    col = [(h // tp, h), (h // tp,)]
    block = (ln + col * 3 + [(h, h // tp), (h,)] + ln
             + [(w // tp, h), (w // tp,), (h, w // tp), (h,)])
    return ([[(vocab, h), (seq, h)]] + [list(block)] * layers
            + [ln + [(vocab, h)]])


def rank_param_bytes(vocab: int, seq: int, layers: int, hidden: int,
                     dp: int, tp: int, bytes_per_param: int = 4,
                     mlp_ratio: int = 4) -> float:
    """Parameter bytes one rank holds: the ledger, TP then FSDP.

    ``(V h + s h + L layer_params(h, t) + 2 h + V h) / d`` parameters:
    TP divides the blocks' matrices, FSDP divides every parameter again
    (exactly when every first dimension divides by ``d``; FSDP2 pads
    otherwise, see :func:`fsdp_rank_param_bytes`).
    """
    layer = _tp.layer_params(hidden, tp, mlp_ratio)["total"]
    psi = 2 * vocab * hidden + seq * hidden + layers * layer + 2 * hidden
    return psi * bytes_per_param / dp


def fsdp_rank_param_bytes(vocab: int, seq: int, layers: int, hidden: int,
                          dp: int, tp: int, bytes_per_param: int = 4,
                          mlp_ratio: int = 4) -> float:
    """The same, with FSDP2's padding of every parameter's first dim."""
    units = unit_shapes(vocab, seq, layers, hidden, tp, mlp_ratio)
    return sum(_calls.fsdp_unit_numel(u, dp) for u in units) \
        * bytes_per_param / dp


def tp_comm(layers: int, micro_batch: int, seq: int, hidden: int, tp: int,
            sequence_parallel: bool = False,
            bytes_per_element: int = 4, norm_tensors: int = 4) -> dict:
    """``{op: {"calls", "bytes"}}`` inside "tp", one step of one
    micro-batch (forward and backward) on one rank; ``{}`` when ``tp`` is
    1. ``micro_batch``: the sequences this rank's "dp" slice holds.
    ``norm_tensors``: the ``h``-wide norm parameters per layer whose
    gradients are partial sums under sequence parallelism (two LayerNorms'
    weights and biases: 4; two RMSNorms: 2)."""
    if tp == 1:
        return {}
    size = micro_batch * seq * hidden * bytes_per_element
    calls = _tp.collective_calls(sequence_parallel)
    out: dict = {}

    def add(op, n, nbytes):
        d = out.setdefault(op, {"calls": 0, "bytes": 0})
        d["calls"] += n
        d["bytes"] += n * nbytes

    for phase in ("forward", "backward"):
        for op, n in calls[phase].items():
            add(op, n * layers, size)
    if sequence_parallel:
        add("all_gather", 2, size)      # before the head, after the embedding
        add("all_reduce", norm_tensors * layers,
            hidden * bytes_per_element)                   # norm grads
    return out


def dp_comm(vocab: int, seq: int, layers: int, hidden: int, dp: int,
            tp: int, bytes_per_param: int = 4, mlp_ratio: int = 4,
            grad_bytes: int | None = None) -> dict:
    """``{op: {"calls", "bytes"}}`` inside "dp": FSDP2 FULL_SHARD on the
    TP-local units (:func:`labkit.predict.sharding.calls.predict_calls`);
    ``grad_bytes``: the reduce dtype's (4 with bf16 parameters and an fp32
    ``reduce_dtype``)."""
    if dp == 1:
        return {}
    units = unit_shapes(vocab, seq, layers, hidden, tp, mlp_ratio)
    return _calls.summarize(_calls.predict_calls(units, dp, "full_shard",
                                                 bytes_per_param,
                                                 grad_bytes))


def step_comm(vocab: int, seq: int, layers: int, hidden: int, dp: int,
              tp: int, micro_batch: int, sequence_parallel: bool = False,
              bytes_per_element: int = 4, mlp_ratio: int = 4,
              grad_bytes: int | None = None) -> dict:
    """``{"tp": {...}, "dp": {...}}``: what one rank sends in one step."""
    return {"tp": tp_comm(layers, micro_batch, seq, hidden, tp,
                          sequence_parallel, bytes_per_element),
            "dp": dp_comm(vocab, seq, layers, hidden, dp, tp,
                          bytes_per_element, mlp_ratio, grad_bytes)}


def shapes(world_size: int) -> list[tuple[int, int]]:
    """Every ``(dp, tp)`` mesh of ``world_size`` ranks, TP innermost."""
    _tp._positive(world_size=world_size)
    return [(world_size // t, t) for t in range(1, world_size + 1)
            if world_size % t == 0]
