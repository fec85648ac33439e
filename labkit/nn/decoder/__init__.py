"""A decoder built from an architecture record: the course's GPT, the
Llama-style block (GQA, SwiGLU, RMSNorm, RoPE) and the variants of
today's published decoders, in one set of modules.

    from labkit import arch
    from labkit.nn.model import build_arch
    m = build_arch(arch.preset("llama-tiny"))      # trains on CPU
    python -m labkit.nn llama-tiny            # size and one loss

Every field of :class:`labkit.arch.Arch` picks a piece (each file says
where each comes from, paper or transformers' modeling file):

- :mod:`~labkit.nn.decoder.attention`: causal self-attention (fused or
  separate Q, K, V; GQA; RoPE, partial; q/k norms per head or over all
  heads; sliding window; soft-capped scores; attention sinks) and the
  gated cross-attention of Llama 3.2 Vision;
- :mod:`labkit.nn.mlp`: GELU, SwiGLU or GeGLU, gate and up fused or not
  (and :mod:`labkit.nn.moe.layer`, whose experts are that MLP, with
  gpt-oss's router and expert biases);
- :mod:`~labkit.nn.decoder.block`: the residual block with pre-, post-
  or sandwich norms, or parallel attention + MLP; the cross-attention
  layer;
- :mod:`~labkit.nn.decoder.stack`: embeddings (extra rows), the layers,
  the head (bias, final soft-cap).

Its parameters are exactly :func:`labkit.predict.model.params.tensors`
(the tests hold ``sum(p.numel())`` to it for every preset and test
config, and for the published families). The course's GPT
(:class:`labkit.nn.model.GPT`) is this decoder on the record's GPT preset
(GELU MLP with biases ``fc``/``proj``, LayerNorm, learned positions, one
fused ``qkv``). The root has three kinds of children -- ``embed``,
``blocks``, ``head`` -- the units FSDP wraps, and no parameter of its own.
Imports torch and the record only (nothing of the launcher or runs).
"""
from labkit.nn.decoder.attention import (Attention, CrossAttention,  # noqa
                                         repeat_kv, rope, rope_tables)
from labkit.nn.decoder.block import Block, CrossBlock  # noqa: F401
from labkit.nn.decoder.fields import norm, record  # noqa: F401
from labkit.nn.decoder.stack import (Decoder, Embeddings, Head,  # noqa
                                     init_weights, recomputed)
from labkit.nn.mlp import MLP  # noqa: F401  (labkit.nn.decoder.MLP)
