"""Multi-head latent attention (MLA): its cache and what training keeps.

    python -m labkit.predict.model.mla            # DeepSeek-V3's bytes per token

Pure Python. MLA (DeepSeek-V2, arXiv 2405.04434, Sec. 2.1.2-2.1.3;
DeepSeek-V3 uses it unchanged) projects each token's input ``h`` down to
one latent ``c_KV = W_DKV h`` of ``kv_lora_rank`` values (Eq. 9), from
which every head's key and value are projected up (``k_C = W_UK c_KV``,
``v_C = W_UV c_KV``, Eqs. 10-11), plus one RoPE key ``k_R = RoPE(W_KR h)``
of ``qk_rope_head_dim`` values shared by all heads (Eq. 15: the rotation
cannot be absorbed into ``W_UK``, so it is kept apart). Queries go
through their own bottleneck of ``q_lora_rank`` (Eqs. 12-14). A head's
query and key are ``qk_nope_head_dim + qk_rope_head_dim`` wide, its value
``v_head_dim``.

What an inference cache keeps per token and layer is ``c_KV`` and
``k_R``: :func:`cache_elems`, ``kv_lora_rank + qk_rope_head_dim`` (576
for DeepSeek-V3, ``9/2`` head dims: DeepSeek-V2, Table 1), against
``2 x kv_heads x head_dim`` for grouped-query attention
(:func:`gqa_cache_elems`). Training is different: attention runs on the
up-projected per-head keys and values, :func:`head_kv_elems` per token,
and autograd keeps them. :func:`saved` lists, tensor by tensor, what one
forward of the small eager block of :mod:`labkit.measure.mla` keeps for
backward (fp32, no recomputation); that measured twin counts the
storages the saved-tensor hooks see and agrees to the byte:

- the two latents, kept by the up-projections' matmuls: ``c_Q`` (``b s
  q_lora_rank``) and ``c_KV`` (``b s kv_lora_rank``);
- the attention core: with ``v_head_dim`` different from the query/key
  width, PyTorch's CPU ``scaled_dot_product_attention`` takes its math
  path, which keeps scaled copies of the per-head queries and keys (``b
  heads s (nope + rope)`` each), the values the block hands it
  contiguous (``b heads s v_head_dim``) and the ``b heads s s``
  probabilities (a fused GPU kernel keeps a
  log-sum-exp per row instead of the probabilities);
- the heads' outputs, made contiguous for the output projection (``b s
  heads v_head_dim``).

The block input, the weights and the RoPE tables exist before the forward
and are not counted; the RMSNorms DeepSeek puts on the latents are left
out of the block.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """One MLA layer on ``batch`` sequences of ``seq`` tokens."""
    batch: int
    seq: int
    hidden: int
    heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    def __post_init__(self):
        for k, v in self.__dict__.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{k} must be a positive integer, "
                                 f"got {v!r}")
        if self.qk_rope_head_dim % 2:
            raise ValueError("qk_rope_head_dim must be even (RoPE turns "
                             f"pairs), got {self.qk_rope_head_dim}")
        if self.v_head_dim == self.qk_nope_head_dim + self.qk_rope_head_dim:
            raise ValueError("v_head_dim equal to the query/key width "
                             "takes SDPA's fused path, which this ledger "
                             "does not describe")

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


def from_arch(a, batch: int, seq: int) -> Shape:
    """The MLA shape of an architecture record with ``kv_lora_rank``."""
    if not getattr(a, "kv_lora_rank", 0):
        raise ValueError(f"{a.name}: no MLA (kv_lora_rank is 0)")
    return Shape(batch, seq, a.hidden, a.heads, a.q_lora_rank,
                 a.kv_lora_rank, a.qk_nope_head_dim, a.qk_rope_head_dim,
                 a.v_head_dim)


def cache_elems(a) -> int:
    """Values an inference cache keeps per token and layer: the latent
    and the shared RoPE key (DeepSeek-V2, Table 1: ``d_c + d_h^R``)."""
    return a.kv_lora_rank + a.qk_rope_head_dim


def gqa_cache_elems(a) -> int:
    """The same for grouped-query attention: every KV head's K and V."""
    return 2 * a.kv_heads * a.head_dim


def head_kv_elems(a) -> int:
    """Per-head keys and values MLA's attention core runs on, per token
    and layer: ``heads x (nope + rope)`` keys, ``heads x v_head_dim``
    values -- what training materialises and keeps."""
    return a.heads * (a.qk_nope_head_dim + a.qk_rope_head_dim
                      + a.v_head_dim)


def saved(m: Shape, elem: int = 4) -> list:
    """``[(name, bytes)]`` the eager block keeps for backward (one
    forward, ``elem`` bytes per value; see the module docstring)."""
    bs, bh = m.batch * m.seq, m.batch * m.heads
    rows = [("c_Q (q up-projection input)", bs * m.q_lora_rank),
            ("c_KV (kv up-projection input)", bs * m.kv_lora_rank),
            ("queries, scaled (SDPA math path)", bh * m.seq * m.qk_head_dim),
            ("keys, scaled (SDPA math path)", bh * m.seq * m.qk_head_dim),
            ("attention probabilities", bh * m.seq * m.seq),
            ("values (SDPA math path)", bh * m.seq * m.v_head_dim),
            ("heads' outputs (o-projection input)",
             bs * m.heads * m.v_head_dim)]
    return [(name, n * elem) for name, n in rows]


def total(rows: list) -> int:
    return sum(b for _, b in rows)


def main() -> int:
    from labkit.predict.model.moe_presets import preset
    a = preset("deepseek-v3")
    print(f"{a.name}: per token and layer, bf16")
    for k, v in (("MLA cache (c_KV + k_R)", cache_elems(a)),
                 ("per-head K and V in attention", head_kv_elems(a))):
        print(f"  {k:32s} {v:7,} values  {2 * v:9,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
