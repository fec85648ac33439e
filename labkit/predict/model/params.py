"""Parameters of a decoder, tensor by tensor, from its architecture record
(pure Python).

    python -m labkit params --hf-config config.json --json
    python -m labkit params --preset llama3-8b

:func:`tensors` lists every weight the model holds, with its shape, under
the names of Hugging Face's Llama modules (``layers.0.self_attn.q_proj
.weight``), so that the tests can hold it to ``transformers``' own build of
the same ``config.json`` tensor by tensor; :func:`count` adds them up per
component (embedding, attention, mlp, norms, head), the total, and the
parameters a token actually uses (``active``: all of them for a dense
model; for a mixture of experts only ``top_k`` of the routed experts).

Per layer, with ``h`` hidden, ``a`` heads, ``k`` KV heads, ``d`` head_dim
and ``f`` the FFN width: attention ``h (a + 2k) d + a d h`` (plus biases),
GELU MLP ``2 h f + f + h``, SwiGLU ``3 h f`` (Shazeer 2020, Eq. 6). For
the GPT (``k = a``, ``d = h / a``, ``f = 4h``) this is ``12 h^2 + 13 h``
with the LayerNorms, Narayanan et al. 2021, Sec. 5.1 (see
:func:`labkit.predict.memory.gpt_params`, which this equals).
"""
from __future__ import annotations

import argparse
import functools
import json

from labkit.predict.model import arch as A
from labkit.predict.model import tensors as T
from labkit.predict.model.tensors import (  # noqa: F401 (params._sum ...)
    _linear, _mlp, _norm, _sum, numel)

COMPONENTS = ("embedding", "attention", "mlp", "norms", "head")


def layer_tensors(a: A.Arch, i: int) -> list:
    """``(name, shape, component)`` of layer ``i``'s weights."""
    if a.kv_lora_rank or a.shared_ffn or a.shared_gate:  # experts, MLA
        from labkit.predict.model.params_moe import layer_tensors as moe
        return moe(a, i)
    return T.layer(a, i)


def tensors(a: A.Arch) -> list:
    """Every weight of the model: ``(name, shape, component)``."""
    h = a.hidden
    t = [("embed_tokens.weight", (a.vocab + a.embed_extra, h),
          "embedding")]
    if a.positions == "learned":
        t.append(("embed_positions.weight", (a.max_seq, h), "embedding"))
    for i in range(a.layers):
        t += layer_tensors(a, i)
    if a.final_norm:
        t += _norm("norm", h, a)
    if not a.tied:
        t.append(("lm_head.weight", (a.vocab, h), "head"))
    if a.head_bias:     # Phi-1's output layer
        t.append(("lm_head.bias", (a.vocab,), "head"))
    return t


def count(a: A.Arch) -> dict:
    """Parameters per component, ``total``, ``active`` (per token) and
    ``per_layer`` (of the first layer; a dense model's are all alike).
    Counted once per record: a plan prices every layout of one model, and
    the count walks every tensor of every layer."""
    return dict(_count(a))


@functools.lru_cache(maxsize=32)
def _count(a: A.Arch) -> dict:
    ts = tensors(a)
    out = {c: _sum(ts, c) for c in COMPONENTS}
    out["total"] = _sum(ts)
    idle = 0
    if a.experts:  # routed experts a token does not visit
        idle = a.moe_layers * (a.experts - a.top_k) * _sum(
            T.expert("e", a))
    out["active"] = out["total"] - idle
    out["per_layer"] = _sum(layer_tensors(a, 0))
    out["tensors"] = len(ts)
    return out


def total(a: A.Arch) -> int:
    return count(a)["total"]


def text_step_idle(a: A.Arch) -> int:
    """Parameters a text-only step leaves without a gradient: the
    cross-attention layers, which it skips (transformers'
    ``MllamaTextModel``), so an optimizer keeps no state for them."""
    return sum(_sum(layer_tensors(a, i)) for i in a.cross_layers)


def matmul_params(a: A.Arch) -> int:
    """Weights that take part in matrix multiplications, per token (N of
    PaLM's 6N, Chowdhery et al. 2022, App. B): the layers' projection
    matrices (active experts only) and the output layer; embedding
    lookups, biases and norms do no matrix multiply."""
    self_layer = next(i for i in range(a.layers) if i not in a.cross_layers)
    per_layer = sum(numel(s) for n, s, part in layer_tensors(a, self_layer)
                    if part != "norms" and len(s) == 2)
    # a cross-attention layer is skipped by a text-only step (transformers'
    # MllamaTextModel: no image states, no work)
    dense = (a.layers - len(a.cross_layers)) * per_layer
    if a.experts:   # exact for the dense part; routed: top_k experts
        mm = sum(numel(s) for n, s, part in tensors(a)
                 if part in ("attention", "mlp") and len(s) == 2)
        one = sum(numel(s) for _, s, _ in T.expert("e", a) if len(s) == 2)
        dense = mm - a.moe_layers * (a.experts - a.top_k) * one
    return dense + a.vocab * a.hidden


def lab_params(m: dict) -> int:
    """Parameters of a lab's ``model`` dict: the GPT's closed form, or
    (``arch="llama"``) the Llama-style block's record
    (:func:`labkit.arch.of_shape`)."""
    if m.get("arch", "gpt") == "gpt":
        return gpt_params(**{k: v for k, v in m.items() if k != "arch"})
    return total(A.of_shape(**m))


def gpt_params(layers: int, hidden: int, heads: int, vocab: int, seq: int,
               mlp_ratio: int = 4, tied: bool = False,
               final_norm: bool = True) -> int:
    """The closed form of :func:`total` for the GPT (positional arguments;
    :func:`labkit.arch.gpt` is its record).

    Per layer: QKV (3h^2 + 3h), attention output (h^2 + h), MLP
    (2 r h^2 + r h + h) and two LayerNorms (4h): (4 + 2r) h^2 + (9 + r) h.
    With r = 4 that is 12 h^2 + 13 h, and with tied embeddings and no final
    LayerNorm the total is Narayanan et al. 2021 ("Efficient Large-Scale
    Language Model Training on GPU Clusters using Megatron-LM"), Sec. 5.1:
    P = 12 l h^2 (1 + 13/(12 h) + (V + s)/(12 l h)).
    The course's tiny GPT (labkit.nn.model) unties the output layer (+ V h) and
    has a final LayerNorm (+ 2 h).
    """
    for name, v in dict(layers=layers, hidden=hidden, heads=heads,
                        vocab=vocab, seq=seq, mlp_ratio=mlp_ratio).items():
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) is not divisible by heads ({heads})")
    h, r = hidden, mlp_ratio
    per_layer = (4 + 2 * r) * h * h + (9 + r) * h
    total = layers * per_layer + (vocab + seq) * h
    if not tied:
        total += vocab * h
    if final_norm:
        total += 2 * h
    return total


# -- command line -------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    A.add_arguments(p, required=True)
    p.add_argument("--json", action="store_true")


def main(args) -> int:
    a = A.from_args(args)
    c = count(a)
    if args.json:
        print(json.dumps({"arch": a.as_dict(), **c}, indent=1))
        return 0
    print(f"{a.name or 'model'}: {a.layers} layers, hidden {a.hidden}, "
          f"{a.heads} heads ({a.kv_heads} KV, head_dim {a.head_dim}), "
          f"{a.mlp} {a.ffn}, vocab {a.vocab}, "
          f"{'tied' if a.tied else 'untied'}")
    if a.multimodal:
        print(f"the language model of {a.multimodal}: its vision tower is "
              "not counted here (python -m labkit build counts it)")
    for k in (*COMPONENTS, "total", "active"):
        print(f"{k:10s}{c[k]:>18,}  ({c[k] / 1e9:.3f} B)")
    return 0
