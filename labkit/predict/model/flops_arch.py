"""FLOPs of one iteration of any decoder its architecture record describes
(pure Python): GQA's narrower K/V projections, SwiGLU, active experts.

    from labkit.predict.model import arch
    from labkit.predict.model.flops_arch import arch_flops
    arch_flops(arch.preset("llama3-8b"), batch=1, seq=8192)
    python -m labkit flops --hf-config config.json --seq 8192 --batch 512
"""
from __future__ import annotations

RECOMPUTE = ("none", "selective", "full")


def _positive(**kw) -> None:
    for name, v in kw.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")


def palm_flops_per_token(n_params: float, layers: int, heads: int,
                         head_dim: int, seq: int,
                         v_head_dim: int | None = None) -> float:
    """Model FLOPs per token, ``6 N + 12 L H Q T`` (PaLM, Appendix B).

    PaLM's ``12 L H Q T`` is ``6 L H T (Q + Q)``: the scores ``Q K^T`` are
    ``Q`` wide per head and the values ``A V`` are ``Q`` wide again. MLA
    (DeepSeek-V2, Sec. 2.1.3) keeps them apart: scores over
    ``qk_nope + qk_rope`` = 192, values of ``v_head_dim`` = 128, so the
    core is ``6 L H T (Q + V)``.
    """
    v = head_dim if v_head_dim is None else v_head_dim
    return 6 * n_params + 6 * layers * heads * (head_dim + v) * seq


def value_head_dim(a) -> int:
    """The width ``A V`` runs at: MLA's ``v_head_dim`` (DeepSeek-V2/V3:
    128 against 192 for the scores), else the query/key ``head_dim``."""
    if getattr(a, "kv_lora_rank", 0) and getattr(a, "v_head_dim", 0):
        return a.v_head_dim
    return a.head_dim


def attention_span(a, seq: int, windowed: bool = False) -> int:
    """Keys each query meets, summed over the layers: PaLM's ``L T``,
    every key of the sequence on every layer (the causal half and a local
    layer's masked keys included, as PaLM counts and as transformers'
    masked attention computes: FlopCounterMode's count). ``windowed``:
    ``min(seq, window)`` on a local layer instead (sliding window: Mistral
    7B, Jiang et al. 2023, Sec. 2; Gemma 2's local layers), what a kernel
    that skips the masked blocks computes."""
    local = len(getattr(a, "window_layers", ()))
    w = (getattr(a, "window", 0) or seq) if windowed else seq
    cross = len(getattr(a, "cross_layers", ()))   # no images: skipped
    return (a.layers - cross - local) * seq + local * min(seq, w)


def arch_flops(a, batch: int, seq: int, recompute: str = "none") -> dict:
    """Model and hardware FLOPs of one iteration of the record ``a``.

    PaLM's ``6 N + 12 L H Q T`` per token (Chowdhery et al. 2022, App. B)
    with N from :func:`labkit.predict.model.params.matmul_params`: GQA's K and V
    projections are ``kv_heads x head_dim`` wide, SwiGLU has three
    matrices, a mixture of experts counts the ``top_k`` experts a token
    visits. The attention core is ``H Q`` wide (query heads: GQA shares K
    and V, not the scores), and MLA's ``A V`` ``H V`` wide; a local
    layer (sliding window) is counted over every key too, as PaLM counts
    the causal half (FlopCounterMode's count of transformers' masked
    attention); ``windowed_model_flops`` (records with local layers)
    counts ``min(seq, window)`` keys there instead. Recomputation as Narayanan et al.
    2021, Eq. 3 and Korthikanti et al. 2022, Sec. 5: full runs every
    layer's forward again (not the output layer), selective the attention
    core. For the
    GPT this equals :mod:`labkit.predict.model.flops`' closed forms.
    """
    from labkit.predict.model import params as P
    _positive(batch=batch, seq=seq)
    if recompute not in RECOMPUTE:
        raise ValueError(f"unknown recompute {recompute!r}")
    mm = P.matmul_params(a)
    v = value_head_dim(a)
    span = attention_span(a, seq)    # PaLM's L T
    core = 2 * a.heads * (a.head_dim + v) * span  # per token, forward
    tokens = batch * seq
    model = tokens * (6 * mm + 3 * core)
    extra = {"none": 0, "selective": core,
             "full": 2 * (mm - a.vocab * a.hidden) + core}[recompute]
    out = {"params": P.total(a), "matmul_params": mm, "tokens": tokens,
           "model_flops": float(model),
           "hardware_flops": float(model + tokens * extra),
           "palm_flops": float(model)}
    if getattr(a, "window_layers", ()):   # a local layer's window only
        near = attention_span(a, seq, windowed=True)
        out["windowed_model_flops"] = float(
            tokens * (6 * mm + 3 * 2 * a.heads * (a.head_dim + v) * near))
    return out
