"""Tensor (Megatron) parallelism: communication, memory, comm vs compute.

    from labkit.predict import tensor_parallel as TP
    TP.comm_payload_bytes(micro_batch=1, seq=2048, hidden=12288, tp=8)
    TP.comm_bytes_sent(1, 2048, 12288, tp=8)       # ring bytes per GPU
    TP.comm_compute(1, 2048, 12288, tp=8, link="ib-hdr", tflops=156)
    from labkit.predict.model import arch
    a = arch.preset("llama3-70b")    # any record where a shape goes:
    TP.layer_params(a, tp=8)          # GQA: 8 KV heads over 8 ranks
    TP.comm_compute(1, 8192, a, tp=8)

Every function takes an architecture record (:mod:`labkit.predict.model.arch`)
in place of the shape: ``hidden`` (or ``layers``) may be an ``Arch``. The
positional GPT is :func:`labkit.predict.model.arch.gpt` of those sizes, and the
tests hold the two equal. With a record, the layer splits as
:mod:`labkit.predict.tensor_parallel.gqa` says (K/V heads over the ranks,
replicated when ``t > kv_heads``), and its activations are
:func:`labkit.predict.pipeline_parallel.stage_bytes.layer_activation_bytes`.

Megatron-LM (Shoeybi et al. 2019, "Megatron-LM: Training Multi-Billion
Parameter Language Models Using Model Parallelism", Sec. 3) splits each
transformer layer over ``t`` GPUs: the first linear layer of the MLP and the
QKV projection by columns (each GPU owns ``1/t`` of the outputs, i.e. of the
heads), the second MLP layer and the attention output projection by rows.
Two conjugate operators glue the pieces: ``f`` is the identity forward and
an all-reduce backward, ``g`` an all-reduce forward and the identity
backward. One layer therefore runs 2 all-reduces forward and 2 backward,
each of the full ``b x s x h`` activation: a ring all-reduce sends
``2 (t-1)/t`` times its size, so a GPU sends ``8 b s h (t-1)/t`` *elements*
per layer per micro-batch (Narayanan et al. 2021, Sec. 3.2), times the
bytes per element (2 in bf16).

Sequence parallelism (Korthikanti et al. 2022, Sec. 4.2.2) replaces each
all-reduce by a reduce-scatter and an all-gather: same bytes on the wire,
but the LayerNorm and dropout activations are split along the sequence, so
the activation memory is divided by ``t`` (:func:`activation_bytes`).

Sizes follow :mod:`labkit.measure.collectives`: a collective's *payload* is
the logical tensor size (all-reduce: the tensor; all-gather: the gathered
output; reduce-scatter: the input), the wire bytes come from
:func:`labkit.predict.collectives.ring_bytes_sent`.

The folder: ``gqa`` (how the KV heads split). Pure Python.
"""
from __future__ import annotations

from labkit.predict import collectives as _coll
from labkit.predict import memory as _memory
from labkit.predict.model.arch import Arch
from labkit.predict.tolerance import (EPS, ROUNDINGS,  # noqa: F401
                                      check_tolerance)


def _hidden(x):
    """The width of a shape argument: an int, or a record's hidden."""
    return x.hidden if isinstance(x, Arch) else x


def _positive(**kw) -> None:
    for name, v in kw.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")


def collective_calls(sequence_parallel: bool = False) -> dict:
    """Collectives of one layer, forward and backward (Megatron-style).

    Without sequence parallelism: ``g`` after the attention output and
    after the MLP (forward), ``f`` before QKV and before the MLP
    (backward). With it, each becomes an all-gather + reduce-scatter pair
    (Korthikanti et al. 2022, Fig. 5): ``g`` -> all-gather forward /
    reduce-scatter backward, ``g-bar`` -> reduce-scatter forward /
    all-gather backward.
    """
    if sequence_parallel:
        return {"forward": {"all_gather": 2, "reduce_scatter": 2},
                "backward": {"all_gather": 2, "reduce_scatter": 2}}
    return {"forward": {"all_reduce": 2}, "backward": {"all_reduce": 2}}


def comm_payload_bytes(micro_batch: int, seq: int, hidden: int, tp: int,
                       bytes_per_element: int = 2, layers: int = 1,
                       sequence_parallel: bool = False,
                       phase: str = "both") -> dict:
    """Payload bytes per op of ``layers`` layers, one micro-batch.

    What :class:`labkit.measure.collectives.CollectiveCounter` records on
    each rank: every collective carries the whole ``b x s x h`` activation.
    ``phase``: ``forward``, ``backward`` or ``both``. ``{}`` when ``tp`` is 1.
    """
    hidden = _hidden(hidden)
    _positive(micro_batch=micro_batch, seq=seq, hidden=hidden, tp=tp,
              bytes_per_element=bytes_per_element, layers=layers)
    if phase not in ("forward", "backward", "both"):
        raise ValueError(f"unknown phase {phase!r}")
    if tp == 1:
        return {}
    size = micro_batch * seq * hidden * bytes_per_element
    calls = collective_calls(sequence_parallel)
    out: dict = {}
    for ph in (("forward", "backward") if phase == "both" else (phase,)):
        for op, n in calls[ph].items():
            out[op] = out.get(op, 0) + n * size * layers
    return out


def comm_bytes_sent(micro_batch: int, seq: int, hidden: int, tp: int,
                    bytes_per_element: int = 2, layers: int = 1,
                    sequence_parallel: bool = False) -> float:
    """Bytes one GPU sends per micro-batch, forward + backward, ring.

    ``8 b s h (t-1)/t`` elements per layer (Narayanan et al. 2021,
    Sec. 3.2), the same with sequence parallelism (Korthikanti et al. 2022,
    Sec. 4.2.2: reduce-scatter + all-gather cost what an all-reduce does).
    """
    payload = comm_payload_bytes(micro_batch, seq, hidden, tp,
                                 bytes_per_element, layers, sequence_parallel)
    # a ring collective's bytes are linear in its size: sum the calls
    return sum(_coll.ring_bytes_sent(op, b, tp) for op, b in payload.items())


def _calls(op: str, sequence_parallel: bool) -> int:
    c = collective_calls(sequence_parallel)
    return c["forward"].get(op, 0) + c["backward"].get(op, 0)


def layer_params(hidden: int, tp: int = 1, mlp_ratio: int = 4) -> dict:
    """Parameters of one layer on one GPU, split as Megatron splits them.

    Column-parallel weights and biases (QKV, MLP in) and row-parallel
    weights (attention out, MLP out) are divided by ``t``; the row-parallel
    biases and both LayerNorms are replicated on every GPU. ``hidden`` a
    record: :func:`labkit.predict.tensor_parallel.gqa.layer_params`.
    """
    if isinstance(hidden, Arch):
        from labkit.predict.tensor_parallel.gqa import layer_params
        return layer_params(hidden, tp)
    _positive(hidden=hidden, tp=tp, mlp_ratio=mlp_ratio)
    h, r = hidden, mlp_ratio
    if (r * h) % tp or h % tp:
        raise ValueError(f"hidden {h} and MLP width {r * h} must divide by "
                         f"tp={tp}")
    sharded = (4 + 2 * r) * h * h // tp + (3 * h + r * h) // tp
    replicated = 2 * h + 4 * h   # two output biases, two LayerNorms
    return {"sharded": sharded, "replicated": replicated,
            "total": sharded + replicated}


def rank_params(layers, hidden: int = 0, vocab: int = 0, seq: int = 0,
                tp: int = 1, pp: int = 1, mlp_ratio: int = 4) -> list[int]:
    """Parameters each rank holds, rank by rank, TP inside PP stages.

    A GPT with untied token embedding and head: with ``tp`` both are split
    by vocabulary (Megatron's vocabulary-parallel embedding and
    column-parallel head), the position embedding and the final LayerNorm
    are replicated, each layer splits as :func:`layer_params`. With ``pp``
    the layers split evenly into stages (``layers`` must divide); the
    first stage holds the embeddings, the last the final LayerNorm and the
    head. Ranks ``i * tp .. i * tp + tp - 1`` form stage ``i``.
    ``layers`` a record: its own stages
    (:func:`labkit.predict.pipeline_parallel.stage_bytes.stage_params`), ``rank_params(a,
    tp=8, pp=16)``.
    """
    if isinstance(layers, Arch):
        from labkit.predict.pipeline_parallel import stage_bytes as SB
        a = layers
        _positive(tp=tp, pp=pp)
        if a.layers % pp or a.vocab % tp:
            raise ValueError(f"layers {a.layers} must divide by pp={pp} "
                             f"and vocab {a.vocab} by tp={tp}")
        parts = (a.layers // pp,) * pp
        return [int(SB.stage_params(a, tp, parts, i)) for i in range(pp)
                for _ in range(tp)]
    _positive(layers=layers, hidden=hidden, vocab=vocab, seq=seq, tp=tp,
              pp=pp)
    if layers % pp or vocab % tp:
        raise ValueError(f"layers {layers} must divide by pp={pp} and vocab "
                         f"{vocab} by tp={tp}")
    h = hidden
    stages = [layers // pp * layer_params(h, tp, mlp_ratio)["total"]
              for _ in range(pp)]
    stages[0] += vocab * h // tp + seq * h
    stages[-1] += 2 * h + vocab * h // tp
    return [n for n in stages for _ in range(tp)]


def activation_bytes(seq: int, micro_batch: int, hidden, heads: int = 0,
                     tp: int = 1, sequence_parallel: bool = False,
                     recompute: str = "none", layers: int = 1) -> float:
    """Activation bytes of ``layers`` layers on one GPU (16-bit).

    Korthikanti et al. 2022, Table 2, via
    :func:`labkit.predict.memory.activation_bytes_per_layer`:
    ``s b h (10 + 24/t + 5 a s/(h t))`` with tensor parallelism,
    ``s b h / t (34 + 5 a s / h)`` with sequence parallelism too.
    ``hidden`` a record (``heads`` then unused): the same terms with its
    widths, :func:`labkit.predict.pipeline_parallel.stage_bytes.layer_activation_bytes`.
    """
    _positive(layers=layers)
    if isinstance(hidden, Arch):
        from labkit.predict.pipeline_parallel.stage_bytes import (
            layer_activation_bytes)
        return layers * layer_activation_bytes(
            hidden, seq, micro_batch, tp, sequence_parallel, recompute)
    if heads % tp:
        raise ValueError(f"heads ({heads}) must divide by tp ({tp})")
    return layers * _memory.activation_bytes_per_layer(
        seq, micro_batch, hidden, heads, tp=tp,
        sequence_parallel=sequence_parallel, recompute=recompute)


def layer_flops(micro_batch: int, seq: int, hidden: int,
                mlp_ratio: int = 4) -> float:
    """Model FLOPs of one layer, forward + backward, one micro-batch.

    ``3 x (24 b s h^2 + 4 b s^2 h)`` for ``r = 4`` (Narayanan et al. 2021,
    appendix); in general ``3 x ((8 + 4 r) b s h^2 + 4 b s^2 h)``. For a
    record: ``3 x (2 b s N_layer + 4 b s^2 q_dim)``, ``N_layer`` its
    matrices (GQA's narrower K/V, SwiGLU's three).
    """
    if isinstance(hidden, Arch):
        from labkit.predict.model import params as P
        a = hidden
        _positive(micro_batch=micro_batch, seq=seq)
        mm = sum(P.numel(sh) for _, sh, part in P.layer_tensors(a, 0)
                 if part != "norms" and len(sh) == 2)
        b, s = micro_batch, seq
        return 3.0 * (2 * mm * b * s + 4 * b * s * s * a.q_dim)
    _positive(micro_batch=micro_batch, seq=seq, hidden=hidden,
              mlp_ratio=mlp_ratio)
    b, s, h = micro_batch, seq, hidden
    return 3.0 * ((8 + 4 * mlp_ratio) * b * s * h * h + 4 * b * s * s * h)


def comm_compute(micro_batch: int, seq: int, hidden: int, tp: int,
                 link: str = "nvlink3", tflops: float = 156.0,
                 bytes_per_element: int = 2, efficiency: float = 0.8,
                 sequence_parallel: bool = False) -> dict:
    """Seconds of TP communication vs computation for one layer.

    Compute: :func:`layer_flops` / ``t`` at ``tflops`` (achieved, not
    peak: 156 is half an A100's 312). Communication: the layer's
    collectives priced by :func:`labkit.predict.collectives.collective_time`
    over ``link`` at ``efficiency`` of its peak. Megatron's TP collectives
    sit on the critical path (the next matmul needs their result), so the
    ratio is roughly the slowdown TP adds.
    """
    if tflops <= 0:
        raise ValueError("tflops must be positive")
    payload = comm_payload_bytes(micro_batch, seq, hidden, tp,
                                 bytes_per_element,
                                 sequence_parallel=sequence_parallel)
    comm = 0.0
    for op, b in payload.items():
        n = _calls(op, sequence_parallel)
        comm += n * _coll.collective_time(op, b / n, tp, link, efficiency)
    # the course's one step-time model: the layer's matmuls on the
    # roofline at the achieved rate, each of 3 passes reading the shard's
    # weights once from an A100's HBM (a token's 6 FLOPs per weight)
    from labkit.predict import roofline as R
    weights = layer_flops(1, 1, hidden) / 6
    layer = R.Op("layer matmuls", "matmul",
                 layer_flops(micro_batch, seq, hidden) / tp,
                 3.0 * bytes_per_element * weights / tp)
    compute = R.step_time([layer], tflops * 1e12, R.chip("a100")[1]
                          )["compute_s"]
    return {"comm_s": comm, "compute_s": compute,
            "ratio": comm / compute, "link": link}
