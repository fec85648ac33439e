"""Attention on the rank's GPU (``meta``) as CUDA runs it: a fused kernel.

    with cuda_attention():             # in a rehearsed rank
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # meta

``scaled_dot_product_attention`` picks its kernel by device. On CUDA it
takes FlashAttention (fp16/bf16, no mask, head dim a multiple of 8 up to
256), else the memory-efficient kernel (fp32, or a mask): both keep for
backward the inputs, the output and one log-sum-exp per row, never the
``seq x seq`` scores (Dao et al., "FlashAttention", NeurIPS 2022, sec.
3.1; PyTorch's ``sdp_utils``, ``select_sdp_backend``). On ``meta`` torch
has no such choice (``_fused_sdp_choice_meta`` answers "math") and the
composite keeps the fp32 ``b x heads x seq x seq`` probabilities: 4.3 GB
a layer for lab 12's gpu8 model (micro-batch 2, 32 heads, seq 4096), a
rehearsed OOM at 201 GB where the GPU holds 51 GB.

While active, ``F.scaled_dot_product_attention`` sends a ``meta`` call to
the kernel CUDA would pick, through the fused operators' own meta
functions and autograd formulas: the bytes CUDA's kernels keep. A patched
function (as ``torch.nn.functional``'s callers look it up), not a
``TorchFunctionMode`` around the rank: tried, a checkpointed block's
recompute inside backward then saved another number of tensors than its
forward (torch.utils.checkpoint's CheckpointError). The inputs are the
caller's: under autocast they are already the linear layers' bf16.
Other devices are left to torch.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

SDPA = F.scaled_dot_product_attention
HALF = (torch.float16, torch.bfloat16)


def kernel(q, attn_mask=None, enable_gqa=False) -> str:
    """The fused kernel CUDA's ``select_sdp_backend`` picks first."""
    d = q.size(-1)
    if attn_mask is None and q.dtype in HALF and d % 8 == 0 and d <= 256 \
            and not enable_gqa:
        return "flash"
    return "efficient"


def _fused(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False,
           scale=None, enable_gqa=False):
    if enable_gqa:            # the efficient kernel's GQA: K/V repeated
        rep = q.size(-3) // k.size(-3)
        k = k.repeat_interleave(rep, dim=-3)
        v = v.repeat_interleave(rep, dim=-3)
    aten = torch.ops.aten
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        # as the composite does: a boolean mask becomes an additive bias
        attn_mask = torch.zeros_like(attn_mask, dtype=q.dtype).masked_fill(
            ~attn_mask, float("-inf"))
    if kernel(q, attn_mask, enable_gqa) == "flash":
        return aten._scaled_dot_product_flash_attention(
            q, k, v, dropout_p, is_causal, False, scale=scale)[0]
    grad = any(t.requires_grad for t in (q, k, v))
    return aten._scaled_dot_product_efficient_attention(
        q, k, v, attn_mask, grad, dropout_p, is_causal, scale=scale)[0]


def sdpa(query, *args, **kwargs):
    """``F.scaled_dot_product_attention``; on ``meta``, CUDA's kernel."""
    if isinstance(query, torch.Tensor) and query.device.type == "meta":
        return _fused(query, *args, **kwargs)
    return SDPA(query, *args, **kwargs)


@contextlib.contextmanager
def cuda_attention():
    F.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = SDPA
