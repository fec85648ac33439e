"""The architecture record: one small description of a decoder that the
model, the parameter count and every ledger read (pure Python, no torch).

    from labkit.predict.model import arch
    a = arch.preset("llama3-8b")
    a = arch.from_hf_config("tests/data/hf_configs/llama3-8b.json")
    python -m labkit params --hf-config config.json --json

A decoder is ``layers`` blocks of attention and an MLP between an embedding
and an output layer. What changed from GPT-2 (Radford et al. 2019) to
Llama (Touvron et al. 2023, Sec. 2.2; Dubey et al. 2024, Sec. 3.2), field by
field:

- ``kv_heads`` < ``heads``: grouped-query attention (Ainslie et al. 2023),
  ``heads / kv_heads`` query heads share one K and one V head (1 = MQA,
  Shazeer 2019); ``head_dim`` may differ from ``hidden / heads`` (Qwen3);
- ``mlp = "swiglu"``: three ``hidden x ffn`` matrices, gate and up, then
  down (Shazeer 2020, Eq. 6), no biases, instead of GELU's two with biases;
- ``norm = "rmsnorm"``: a scale and no bias (Zhang & Sennrich 2019);
  ``qk_norm``: an RMSNorm of ``head_dim`` on every query and key (Qwen3);
- ``positions = "rope"``: rotary positions (Su et al. 2021), no table;
- ``tied``: the output layer reuses the input embedding (GPT-2) or not;
- ``qkv_fused``: Q, K and V as one matrix (GPT-2's ``c_attn``, Megatron's
  layout) -- the same parameters, another module layout;
- biases: ``qkv_bias`` (GPT-2, Qwen2), ``out_bias``, ``mlp_bias``;
- mixture of experts (``experts`` > 0): ``experts`` MLPs of width
  ``expert_ffn`` per layer, ``top_k`` of them per token, ``shared_experts``
  always on, the first ``first_dense_layers`` layers dense.

Named presets are below (:data:`PRESETS`): the GPT shapes the course used
before this record existed, each one exactly, and published Llama models;
:func:`from_hf_config` reads a Hugging Face ``config.json``
(:mod:`labkit.predict.model.hf_config`).
"""
from __future__ import annotations

from dataclasses import fields

from labkit.predict.model.record import (  # noqa: F401 (the record)
    MLPS, NORMS, POSITIONS, Arch)


def gpt(layers: int, hidden: int, heads: int, vocab: int, seq: int,
        mlp_ratio: int = 4, tied: bool = False, final_norm: bool = True,
        name: str = "") -> Arch:
    """The course's GPT (GPT-2 layout: LayerNorm, learned positions of
    ``seq`` rows, GELU MLP of width ``mlp_ratio x hidden``, all biases)."""
    return Arch(layers, hidden, heads, vocab, ffn=mlp_ratio * hidden,
                max_seq=seq, tied=tied, qkv_fused=True,
                final_norm=final_norm, name=name)


def llama(layers: int, hidden: int, heads: int, kv_heads: int, ffn: int,
          vocab: int, max_seq: int = 8192, rope_theta: float = 500000.0,
          name: str = "", **kw) -> Arch:
    """A Llama-style decoder: GQA, SwiGLU, RMSNorm, RoPE, no biases."""
    return Arch(layers, hidden, heads, vocab, ffn=ffn, kv_heads=kv_heads,
                mlp="swiglu", norm="rmsnorm", positions="rope",
                max_seq=max_seq, qkv_bias=False, out_bias=False,
                mlp_bias=False, rope_theta=rope_theta, name=name, **kw)


def llama_shape(hidden: int, heads: int, mlp_ratio: int = 4):
    """``(kv_heads, ffn)`` of the Llama-style block at a GPT's size: half
    as many K/V heads (GQA, group 2; MHA with an odd head count), and the
    SwiGLU width 2/3 of ``mlp_ratio x hidden`` rounded up to a multiple of
    16 (Touvron et al. 2023, Sec. 2.2; ``multiple_of`` in their code), so
    the MLP keeps about the GELU MLP's parameters with 3 matrices."""
    kv = heads // 2 if heads % 2 == 0 else heads
    ffn = -(-(2 * mlp_ratio * hidden // 3) // 16) * 16
    return kv, ffn


def of_shape(layers: int, hidden: int, heads: int, vocab: int, seq: int,
             mlp_ratio: int = 4, arch: str = "gpt") -> Arch:
    """The record of a lab's ``model`` dict (``labkit.nn.model.GPTConfig``'s
    fields): the course's GPT, or (``arch="llama"``) the Llama-style block
    at the same layers, hidden, heads, vocabulary and sequence."""
    if arch == "llama":
        kv, ffn = llama_shape(hidden, heads, mlp_ratio)
        return llama(layers, hidden, heads, kv, ffn, vocab, max_seq=seq)
    if arch != "gpt":
        raise ValueError(f"arch must be gpt or llama, got {arch!r}")
    return gpt(layers, hidden, heads, vocab, seq, mlp_ratio)


# Presets. GPT shapes: GPT-3 (Brown et al. 2020, Table 2.1) and the
# Llama-2-like GPT shapes that labkit.predict.model.shapes used for --params, and
# the tiny GPT of labkit.nn.model. Llama: the published config.json files
# (tests/data/hf_configs/ holds them; tests check these presets equal them).
PRESETS = {
    "gpt-tiny": gpt(2, 64, 4, 256, 32),
    "gpt-1.3b": gpt(24, 2048, 16, 51200, 2048),
    "gpt-2.7b": gpt(32, 2560, 32, 51200, 2048),
    "gpt-6.7b": gpt(32, 4096, 32, 51200, 2048),
    "gpt-13b": gpt(40, 5120, 40, 32000, 4096),
    "gpt-30b": gpt(60, 6656, 52, 32000, 2048),
    "gpt-70b": gpt(80, 8192, 64, 32000, 4096),
    "gpt-175b": gpt(96, 12288, 96, 51200, 2048),
    "llama-tiny": llama(2, 64, 4, 2, 176, 256, max_seq=32),
    "llama3-8b": llama(32, 4096, 32, 8, 14336, 128256),
    "llama3-70b": llama(80, 8192, 64, 8, 28672, 128256),
    "llama3.1-405b": llama(126, 16384, 128, 8, 53248, 128256,
                           max_seq=131072),
    "llama2-70b": llama(80, 8192, 64, 8, 28672, 32000, max_seq=4096,
                        rope_theta=10000.0),
}
PRESETS = {k: v.with_(name=k) for k, v in PRESETS.items()}


def preset(name: str) -> Arch:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r} (choose from "
                         f"{', '.join(PRESETS)})")
    return PRESETS[name]


def from_hf_config(source) -> Arch:
    """The record of a Hugging Face ``config.json`` (a path or a dict)."""
    from labkit.predict.model.hf_config import read   # the parser lives apart
    return read(source)


FIELDS = tuple(f.name for f in fields(Arch))


# -- command line ------------------------------------------------------------

def add_arguments(p, required: bool = False) -> None:
    """``--hf-config PATH`` or ``--preset NAME`` for a command."""
    g = p.add_mutually_exclusive_group(required=required)
    g.add_argument("--hf-config", metavar="PATH",
                   help="a model's Hugging Face config.json (a file)")
    g.add_argument("--preset", choices=list(PRESETS),
                   help="a named architecture")


def from_args(args) -> Arch | None:
    """The record named by :func:`add_arguments`'s flags (None: neither)."""
    if getattr(args, "hf_config", None):
        return from_hf_config(args.hf_config)
    if getattr(args, "preset", None):
        return preset(args.preset)
    return None
