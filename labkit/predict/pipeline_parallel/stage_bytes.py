"""What one GPU of a pipeline stage holds, read from the architecture record
(pure Python): its parameters, one layer's activations in Korthikanti's
closed form (tensor and sequence parallel), the output layer's logits and
the K/V buffers of ring attention. The planner
(:mod:`labkit.predict.choosing.layout_cost`) prices every layout with these.

    from labkit.predict.model import arch
    from labkit.predict.pipeline_parallel import stage_bytes as SB
    a = arch.preset("llama3.1-405b")
    SB.stage_params(a, tp=8, parts=(7,) + (8,) * 14 + (7,), stage=15)
    SB.layer_activation_bytes(a, seq=8192, batch=1, tp=8,
                              sequence_parallel=True)

Korthikanti et al. 2022, Table 2 counts one GPT layer in 16-bit as
``s b h (34 + 5 a s / h)``: 10 ``s b h`` that tensor parallelism leaves
replicated (two LayerNorm inputs 4, the QKV and MLP inputs 2 + 2, two
dropout masks 1 + 1), 24 it splits over ``t`` (Q, K, V 6, the attention
output 2, the GELU input and the MLP output projection's input 8 + 8),
and the ``5 a s^2 b`` of the attention scores, split too. Sequence
parallelism (Sec. 4.2.2) splits the 10 as well: ``s b h / t (34 + 5as/h)``.
The same terms, read from the record ``a``:

- Q, K, V: ``2 s b (q_dim + 2 kv_dim)`` -- grouped-query attention's K and V
  are ``kv_heads x head_dim`` wide (Ainslie et al. 2023); with ``t >
  kv_heads`` each rank keeps one whole K/V head
  (:func:`labkit.predict.tensor_parallel.gqa.kv_split`);
- the attention output: ``2 s b q_dim``; the scores ``5 heads s^2 b``
  (selective recomputation and fused attention do not keep them);
- the MLP: GELU keeps its input and output, ``4 s b ffn``; SwiGLU, as
  Megatron-LM's fused ``bias_swiglu`` keeps it, the gate-and-up output
  (``4 s b ffn``) and the down projection's input (``2 s b ffn``): 6;
- dropout masks only where the family trains with dropout: the GPT-2
  layout (``mlp == "gelu"``, Radford et al. 2019); Llama trains without
  (its ``config.json``: ``attention_dropout`` 0).

On the GPT (``arch.gpt``) these are Korthikanti's numbers exactly
(:func:`labkit.predict.memory.activation_bytes_per_layer`; the tests hold
it, float for float).
"""
from __future__ import annotations

import functools

from labkit.predict.tensor_parallel.gqa import kv_split
from labkit.predict.tensor_parallel.gqa import layer_params as _layer


def _dense(a) -> None:
    if a.experts:
        raise ValueError("a mixture of experts is planned by "
                         "labkit.predict.choosing.plan_moe (expert parallelism)")


def split_error(a, tp: int) -> str:
    """Why ``tp`` cannot split the record's layer ('' when it can)."""
    try:
        _layer(a, tp)
    except ValueError as e:
        return str(e)
    return ""


def _per_record(f):
    """``f(a, tp)`` remembered per (record, tp): a record is frozen, and
    the planner asks for every stage of every layout it prices (a record
    that cannot be hashed is computed each time)."""
    cached = functools.lru_cache(maxsize=4096)(f)

    def call(a, tp: int = 1):
        try:
            return cached(a, tp)
        except TypeError:      # unhashable: a record-like object
            return f(a, tp)
    call.__doc__, call.__name__ = f.__doc__, f.__name__
    return call


@_per_record
def layer_params(a, tp: int = 1) -> int:
    """Parameters of one layer on one TP rank (K/V replicated when
    ``tp > kv_heads``)."""
    _dense(a)
    return _layer(a, tp)["total"]


def embedding_params(a, tp: int = 1) -> float:
    """The first stage's extra: the vocabulary-parallel word embedding
    (``V h / t``) and, for learned positions, their table (``s h``)."""
    pos = a.max_seq * a.hidden if a.positions == "learned" else 0
    return (a.vocab + a.embed_extra) * a.hidden / tp + pos


def head_params(a, tp: int = 1) -> float:
    """The last stage's extra: the output layer, column-parallel by
    vocabulary (``V h / t``: untied it is its own weight, tied it is
    Megatron-LM's copy of the embedding on the last stage), and the final
    norm (replicated)."""
    norm = a.hidden * (2 if a.norm == "layernorm" else 1) * a.final_norm
    return a.vocab * (a.hidden + a.head_bias) / tp + norm


def end_params(a, tp: int, stages: int, stage: int) -> float:
    """What stage ``stage`` of ``stages`` holds beside its layers: the
    embedding on the first, the output layer and final norm on the last.
    One stage holding both ends keeps one copy of a tied embedding and
    both matrices of an untied one."""
    psi = 0.0
    last = stage == stages - 1
    if stage == 0:
        psi += embedding_params(a, tp)
        if last and not a.tied:
            psi += head_params(a, tp)
        elif last and a.final_norm:
            psi += head_params(a, tp) - a.vocab * a.hidden / tp
    elif last:
        psi += head_params(a, tp)
    return psi


@_per_record
def cross_layer_params(a, tp: int = 1) -> float:
    """Parameters of one gated cross-attention layer on one TP rank
    (Llama 3.2 Vision; :func:`labkit.predict.model.tensors.cross_layer`).
    Its projections have the self-attention layer's shapes (transformers'
    ``MllamaTextCrossAttention``: q from the text, k and v from the image
    features, both ``hidden`` wide) and split alike; what it adds, the
    per-head q/k norms and the two tanh gates, is replicated."""
    from labkit.predict.model.tensors import cross_layer, layer, numel
    if not a.cross_layers:
        raise ValueError("this record has no cross-attention layers")
    own = next(i for i in range(a.layers) if i not in a.cross_layers)
    mats = [sorted(s for _, s, _ in ts if len(s) == 2) for ts in
            (cross_layer(a, a.cross_layers[0]), layer(a, own))]
    if mats[0] != mats[1]:
        raise ValueError("a cross-attention layer whose matrices differ "
                         "from the self-attention layer's is not split "
                         "here")
    extra = (sum(numel(s) for _, s, _ in cross_layer(a, a.cross_layers[0]))
             - sum(numel(s) for _, s, _ in layer(a, own)))
    return layer_params(a, tp) + extra


def stage_layers(a, parts, stage: int) -> tuple[int, int]:
    """``(self, cross)``: stage ``stage``'s self-attention layers and its
    gated cross-attention layers (``a.cross_layers``; layers are dealt to
    the stages in order, ``parts[i]`` each)."""
    first = sum(parts[:stage])
    cross = sum(first <= i < first + parts[stage]
                for i in getattr(a, "cross_layers", ()))
    return parts[stage] - cross, cross


def computing_layers(a, parts, stage: int) -> int:
    """Layers of the stage that compute in a text-only step: a
    cross-attention layer without image states is skipped, no FLOPs and
    no activations (transformers' ``MllamaTextModel.forward``: ``if
    is_cross_attention_layer and cross_attention_states is None and
    is_cross_attention_cache_empty: continue``), as the record's FLOPs
    count it (:func:`labkit.predict.model.flops_arch.attention_span`,
    :func:`labkit.predict.model.params.matmul_params`)."""
    return stage_layers(a, parts, stage)[0]


def stage_params(a, tp: int, parts, stage: int) -> float:
    """Parameters on one GPU of pipeline stage ``stage`` (``parts``: layers
    per stage): its layers (a cross-attention layer by its own count,
    :func:`cross_layer_params`) and :func:`end_params`. A skipped
    cross-attention layer is still held, with its gradient buffer and
    optimizer states."""
    own, cross = stage_layers(a, parts, stage)
    return (own * layer_params(a, tp)
            + (cross * cross_layer_params(a, tp) if cross else 0)
            + end_params(a, tp, len(parts), stage))


def activation_terms(a, tp: int = 1) -> dict:
    """:func:`_activation_terms`, a fresh dict each call."""
    return dict(_activation_terms(a, tp))


@_per_record
def _activation_terms(a, tp: int = 1) -> dict:
    """One layer's activation terms in units of ``s b h`` 16-bit bytes:
    ``replicated`` (split only by sequence parallelism), ``split`` (by
    ``t``; the scores, ``5 heads s / h``, come on top), and ``kv_extra``
    (per ``s b``: the K/V bytes a rank keeps beyond its ``1/t`` share when
    ``t > kv_heads``)."""
    _dense(a)
    h = a.hidden
    dropout = a.mlp == "gelu"
    replicated = 4 + 2 + 2 + (2 if dropout else 0)
    mlp = (4 if a.mlp == "gelu" else 6) * a.ffn / h
    split = 2 * (a.q_dim + 2 * a.kv_dim) / h + 2 * a.q_dim / h + mlp
    per_rank = kv_split(a, tp)["kv_heads_per_rank"] * a.head_dim
    kv_extra = 2 * 2 * (per_rank - a.kv_dim / tp) if tp > 1 else 0.0
    return {"replicated": replicated, "split": split, "kv_extra": kv_extra}


def layer_activation_bytes(a, seq: int, batch: int, tp: int = 1,
                           sequence_parallel: bool = False,
                           recompute: str = "none") -> float:
    """Activation bytes one layer keeps for backward on one GPU (16-bit),
    Korthikanti et al. 2022, Table 2, with the record's widths."""
    if recompute not in ("none", "selective", "full"):
        raise ValueError(f"unknown recompute {recompute!r}")
    for name, v in dict(seq=seq, batch=batch, tp=tp).items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    s, b, h, t = seq, batch, a.hidden, tp
    sbh = s * b * h
    if recompute == "full":
        return 2.0 * sbh
    k = activation_terms(a, t)
    attn = 0.0 if recompute == "selective" else 5.0 * a.heads * s / h
    extra = s * b * k["kv_extra"]
    if sequence_parallel:
        return sbh / t * (k["replicated"] + k["split"] + attn) + extra
    return sbh * (k["replicated"] + k["split"] / t + attn / t) + extra


def logits_bytes(a, seq: int, batch: int, tp: int = 1) -> float:
    """The last stage's output-layer buffers, Korthikanti et al. 2022,
    Sec. 4.3: ``4 s b h / t (1 + V / h)`` -- with a 128K vocabulary the
    ``V / h`` term is what counts (Llama 3: 128256 / 16384 = 7.8)."""
    return 4.0 * seq * batch * a.hidden / tp * (1 + a.vocab / a.hidden)


def kv_width(a, tp: int = 1) -> float:
    """Width of one rank's K (or V) block: ``kv_dim / t``, or one whole
    head when ``t > kv_heads`` (replicated)."""
    if tp > a.kv_heads:
        return kv_split(a, tp)["kv_heads_per_rank"] * a.head_dim
    return a.kv_dim / tp


def ring_buffer_bytes(a, seq: int, batch: int, tp: int = 1) -> float:
    """Ring attention's K/V blocks on one rank, the one in use and the one
    arriving (16-bit), ``seq``: the rank's own tokens."""
    if tp > a.kv_heads:
        return 2 * 2 * batch * seq * kv_width(a, tp) * 2
    return 2 * 2 * batch * seq * a.kv_dim / tp * 2
