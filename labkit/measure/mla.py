"""Measure what a small MLA block keeps for backward (twin of predict.model.mla).

    python -m labkit.measure.mla      # predicted, measured, ratio on CPU

:class:`MLABlock` is multi-head latent attention as DeepSeek-V2 writes it
(arXiv 2405.04434, Sec. 2.1.2-2.1.3): down-projections to the query
latent ``c_Q`` and the key-value latent ``c_KV``, a shared RoPE key
``k_R`` from the block input, per-head up-projections, causal
``scaled_dot_product_attention`` and the output projection. Its weights
are separate bias-free ``nn.Linear``s (DeepSeek's ``kv_a_proj_with_mqa``
fuses ``W_DKV`` and ``W_KR``: the same products); the latents' RMSNorms
are left out. :func:`measure` runs one forward under
``torch.autograd.graph.saved_tensors_hooks`` and counts each storage
autograd saves once, at its size, leaving out what existed before the
forward (the input, the weights, the RoPE tables), as
:func:`labkit.measure.activations.hooked_bytes` does for the GPT.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from labkit.predict.model import mla as P


def _rotate_half(t: torch.Tensor) -> torch.Tensor:
    a, b = t.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


class MLABlock(nn.Module):
    def __init__(self, m: P.Shape, theta: float = 10000.0):
        super().__init__()
        self.m = m
        h, n = m.hidden, m.heads
        self.w_dq = nn.Linear(h, m.q_lora_rank, bias=False)
        self.w_uq = nn.Linear(m.q_lora_rank, n * m.qk_head_dim, bias=False)
        self.w_dkv = nn.Linear(h, m.kv_lora_rank, bias=False)
        self.w_kr = nn.Linear(h, m.qk_rope_head_dim, bias=False)
        self.w_ukv = nn.Linear(m.kv_lora_rank,
                               n * (m.qk_nope_head_dim + m.v_head_dim),
                               bias=False)
        self.w_o = nn.Linear(n * m.v_head_dim, h, bias=False)
        half = m.qk_rope_head_dim // 2
        inv = theta ** (-torch.arange(half, dtype=torch.float32) / half)
        ang = torch.arange(m.seq, dtype=torch.float32)[:, None] * inv
        self.register_buffer("cos", torch.cat([ang.cos()] * 2, -1), False)
        self.register_buffer("sin", torch.cat([ang.sin()] * 2, -1), False)

    def _rope(self, t: torch.Tensor, heads: bool) -> torch.Tensor:
        cos, sin = ((self.cos[:, None], self.sin[:, None]) if heads
                    else (self.cos, self.sin))
        return t * cos + _rotate_half(t) * sin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.m
        b, s, n, dn = m.batch, m.seq, m.heads, m.qk_nope_head_dim
        q = self.w_uq(self.w_dq(x)).view(b, s, n, m.qk_head_dim)
        kv = self.w_ukv(self.w_dkv(x)).view(b, s, n, dn + m.v_head_dim)
        k_r = self._rope(self.w_kr(x), heads=False)     # one for all heads
        q = torch.cat([q[..., :dn], self._rope(q[..., dn:], heads=True)],
                      dim=-1)
        k = torch.cat([kv[..., :dn],
                       k_r[:, :, None].expand(b, s, n, m.qk_rope_head_dim)],
                      dim=-1)
        # values contiguous: SDPA's math path then keeps this storage
        # whatever the batch (with b = 1 it would keep a view of kv)
        v = kv[..., dn:].transpose(1, 2).contiguous()
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v, is_causal=True)
        return self.w_o(o.transpose(1, 2).reshape(b, s, n * m.v_head_dim))


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def measure(m: P.Shape, seed: int = 0) -> dict:
    """``{"total", "tensors": [(bytes, shape)]}`` the forward of
    :class:`MLABlock` on ``m`` (fp32, CPU) saves for its backward."""
    torch.manual_seed(seed)
    block = MLABlock(m)
    x = torch.randn(m.batch, m.seq, m.hidden, requires_grad=True)
    before = {_key(t) for t in (x, *block.parameters(), *block.buffers())}
    seen: dict = {}

    def pack(t):
        k = _key(t)
        if k not in before:
            seen[k] = (t.untyped_storage().nbytes(), tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = block(x)
    y.sum().backward()          # what was saved is enough for backward
    tensors = sorted(seen.values())
    return {"total": sum(n for n, _ in tensors), "tensors": tensors}


def main() -> int:
    m = P.Shape(batch=2, seq=64, hidden=256, heads=4, q_lora_rank=96,
                kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16,
                v_head_dim=32)
    pred, got = P.total(P.saved(m)), measure(m)["total"]
    print(f"predicted {pred:,} B  measured {got:,} B  "
          f"ratio {got / pred:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
